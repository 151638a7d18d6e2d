#!/usr/bin/env bash
# make image: builds the project's OCI images without a Docker daemon or a registry and saves them as OCI archives:
#   _output/images/ovn-egressip.tar       ovnkube + directconn, static (CGO_ENABLED=0), on an empty base, user 65532
#                                          (the master Deployment and directconn)
#   _output/images/ovn-egressip-node.tar  ovnkube on a minimal Debian 12 root made by mmdebstrap (dash and iptables
#                                          with both backends, chosen by contrib/image/iptables-wrapper), user 0
#                                          (the node DaemonSet: it programs addresses and iptables)
# Labels: org.opencontainers.image.{version,revision,source,created,title}. Every file is stamped with the commit
# time: the same commit gives the same ovn-egressip image digest (contrib/image/check-reproducible.sh). The Debian
# root is built once per machine and package set (about 11 s) and cached in ${OVN_EIP_CACHE:-/var/cache/ovn-egressip}.
# Prints one line per image: NAME:TAG DIGEST.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${IMAGE_OUT:-$root/_output/images}
tag=${IMAGE_TAG:-latest}
source_url=${IMAGE_SOURCE:-https://github.com/ovn-egressip/ovn-egressip}
version=$(git describe --tags --always --dirty)
revision=$(git rev-parse HEAD)
created=$(git log -1 --format=%ct)
cache=${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/image-root
mkdir -p "$out/bin" "$root/_output/bin" "$cache"

# The static binaries: no cgo, no build paths, no build id, no VCS stamp (the labels carry version and revision;
# ovnkube --version prints the version, stamped at link time).
for cmd in ovnkube directconn; do
  CGO_ENABLED=0 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= -X github.com/ovn-egressip/ovn-egressip/go-controller/pkg/version.gitVersion=$version" \
    -o "$out/bin/$cmd" "./go-controller/cmd/$cmd"
done
go build -C contrib/image -trimpath -o "$root/_output/bin/ociimage" ./ociimage

# The node image's Debian root: only the packages' files (variant extract: no maintainer scripts run, so no
# alternatives; the wrapper below is what iptables means), without documentation.
pkgs=base-files,base-passwd,dash,iptables
mmargs=(--mode=root --variant=extract "--include=$pkgs"
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --customize-hook='cp "$1/usr/share/base-passwd/passwd.master" "$1/etc/passwd"'
  --customize-hook='cp "$1/usr/share/base-passwd/group.master" "$1/etc/group"'
  bookworm)
key=$(printf '%s\n' "${mmargs[@]}" | sha256sum | cut -c1-16)
base=$cache/debian-$key.tar
if [[ ! -s $base ]]; then
  command -v mmdebstrap >/dev/null || { echo "image: mmdebstrap not found (make install-deps)" >&2; exit 1; }
  echo "image: building the node image's Debian root with mmdebstrap (once per machine, cached in $base)" >&2
  exec 9>"$cache/.lock"; flock 9
  if [[ ! -s $base ]]; then
    SOURCE_DATE_EPOCH=$created mmdebstrap --quiet --format=tar "${mmargs[@]}" "$base.tmp" >&2
    mv "$base.tmp" "$base"
  fi
fi

labels=(-label "org.opencontainers.image.version=$version" -label "org.opencontainers.image.revision=$revision"
  -label "org.opencontainers.image.source=$source_url" -label "org.opencontainers.image.created=$(date -u -d "@$created" +%Y-%m-%dT%H:%M:%SZ)")
oci=$root/_output/bin/ociimage
"$oci" build -out "$out/ovn-egressip.tar" -name ovn-egressip -tag "$tag" -created "$created" -user 65532:65532 \
  "${labels[@]}" -label "org.opencontainers.image.title=ovn-egressip (ovnkube, directconn; static)" \
  -add "$out/bin/ovnkube:/usr/bin/ovnkube" -add "$out/bin/directconn:/usr/bin/directconn"
links=()
for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  links+=(-symlink "/usr/sbin/$n:iptables-wrapper")
done
"$oci" build -out "$out/ovn-egressip-node.tar" -name ovn-egressip-node -tag "$tag" -created "$created" -user 0:0 \
  "${labels[@]}" -label "org.opencontainers.image.title=ovn-egressip node daemon (ovnkube, iptables legacy+nft)" \
  -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  -base "$base" -add "$out/bin/ovnkube:/usr/bin/ovnkube" -add "contrib/image/iptables-wrapper:/usr/sbin/iptables-wrapper" \
  "${links[@]}"

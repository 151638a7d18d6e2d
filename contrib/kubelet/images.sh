#!/usr/bin/env bash
# make kubelet-images (after make image): the two images the kubelet mode needs besides the product's, as OCI
# archives in _output/images, built like them (static Go programs, contrib/image/ociimage, no daemon, no registry):
#   oeip-pause.tar   the pod sandbox image (contrib/kubelet/pause: waits for SIGTERM), containerd's sandbox_image
#   oeip-prober.tar  the served pod of the demo (contrib/kubelet/prober: asks the external echo server every 20 ms)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${IMAGE_OUT:-$root/_output/images}
oci=$root/_output/bin/ociimage
[[ -x $oci ]] || { echo "kubelet-images: $oci missing: make image" >&2; exit 1; }
created=$(git log -1 --format=%ct)
mkdir -p "$out/bin"
for p in pause prober; do
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -buildid=" -o "$out/bin/$p" "./contrib/kubelet/$p"
done
"$oci" build -out "$out/oeip-pause.tar" -name oeip-pause -tag latest -created "$created" -user 65535:65535 \
  -entrypoint /pause -add "$out/bin/pause:/pause"
"$oci" build -out "$out/oeip-prober.tar" -name oeip-prober -tag latest -created "$created" -user 65532:65532 \
  -entrypoint /prober -add "$out/bin/prober:/prober"

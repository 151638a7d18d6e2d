#!/usr/bin/env bash
# Builds userspace Open vSwitch (no kernel module, no DPDK) from Debian's source package openvswitch 4.0.0-2 (sid)
# into the per-machine cache that survives cluster-down and fresh clones, the way contrib/build-kube.sh caches
# kube-apiserver:
#   ${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/ovs-4.0.0-2/bin/{ovs-vswitchd,ovsdb-server,ovsdb-tool,ovs-vsctl,
#     ovs-appctl,ovs-ofctl,ovs-dpctl}   (bin/.stamp holds the version, build.log the last build's output)
#   .../ovs-4.0.0-2/share/openvswitch/vswitch.ovsschema   (the schema of those programs' Open_vSwitch database)
# Prints the bin directory on stdout, progress on stderr. Cold build: about 4 minutes on 2 cores (6.5 beside another build); cached: instant.
# The test bed (test/cluster: OVSTools) runs these instead of Debian bookworm's openvswitch-switch 3.1.0, whose
# userspace conntrack aborts ovs-vswitchd under load (conntrack.c:1063 assertion conn->conn_type ==
# CT_CONN_TYPE_DEFAULT; fixed upstream in 3.1.3). OVN (northd, ovn-controller, the NB/SB ovsdb-servers) stays
# bookworm's.
# Why sid's 4.0.0-2 and not trixie's 3.5.0-1: the archive's trixie Sources index lists 3.5.0-1 but its files are
# not served (404); sid's are. bookworm's own 3.1.0 source cannot be had either (its orig tarball: 404).
# The source comes with `apt-get source` from the Debian archive of the machine's apt sources, through a private apt
# configuration (its own sources list, lists and cache under the cache dir; the system's apt sources are not touched), checked the way apt checks packages: the suite's
# Release file signed by a key of /usr/share/keyrings/debian-archive-keyring.gpg, the tarballs' hashes from the
# signed Sources index. Missing build dependencies are installed with apt-get from the system's sources (as root).
# Concurrent callers are serialised with flock: one builds, the others wait and reuse it.
# On failure it prints one line naming the cause and exits 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
V=4.0.0-2
SUITE=sid
UPSTREAM=${V%-*}
cache=${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/ovs-$V
bin=$cache/bin
schema=$cache/share/openvswitch/vswitch.ovsschema
progs=(ovs-vswitchd ovsdb-server ovsdb-tool ovs-vsctl ovs-appctl ovs-ofctl ovs-dpctl)
cached() {
  [[ -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$V" && -f $schema ]] || return 1
  local x; for x in "${progs[@]}"; do [[ -x $bin/$x ]] || return 1; done
}
. "$here/cache.sh"
cache_reuse_or_lock "$bin" "$cache"
log=$cache/build.log
: >"$log"
fail() { echo "build-ovs: $* (log $log)" >&2; exit 1; }

# build dependencies of userspace OVS (configure finds OpenSSL; libcap-ng, libunbound, AF_XDP and DPDK are left out)
deps=(build-essential dpkg-dev python3 libssl-dev pkgconf)
need=()
for d in "${deps[@]}"; do
  dpkg-query -W -f='${Status}\n' "$d" 2>/dev/null | grep -q '^install ok installed$' || need+=("$d")
done
if ((${#need[@]})); then
  [[ $(id -u) == 0 ]] || fail "missing build dependencies ${need[*]}: run as root to apt-get install them"
  echo "build-ovs: apt-get install ${need[*]}" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } \
    >>"$log" 2>&1 || fail "cannot install build dependencies ${need[*]}: $(grep -E '^E:' "$log" | head -n1)"
fi

echo "build-ovs: fetching Debian source openvswitch $V ($SUITE) and building userspace OVS (cold: ~4 min; log $log)" >&2
apt=$cache/apt
src=$cache/src
rm -rf "$apt" "$src"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$src"
# the Debian archive the machine's own apt sources use (the one of its release's main component)
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
mirror=$(apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT)' 2>/dev/null |
  awk -v c="$codename" '!found && $2 == c && $3 == "main" { print $1; found = 1 }')
[[ -n $mirror ]] || fail "no Debian archive for '$codename' main in the machine's apt sources"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $SUITE main" >"$apt/sources.list"
aptopts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Acquire::Languages=none)
# apt downloads as the unprivileged _apt user: the directories it writes to must be its
id _apt >/dev/null 2>&1 && chown -R _apt "$apt/lists" "$apt/cache/archives" "$src"
apt-get "${aptopts[@]}" update >>"$log" 2>&1 || fail "apt-get update of the $SUITE deb-src index failed: $(grep -E '^(E|W):' "$log" | head -n1)"
(cd "$src" && apt-get "${aptopts[@]}" source "openvswitch=$V") >>"$log" 2>&1 ||
  fail "apt-get source openvswitch=$V ($SUITE) failed: $(grep -E '^E:' "$log" | head -n1)"
tree=$src/openvswitch-$UPSTREAM
[[ -x $tree/configure ]] || fail "the source package has no configure script in $tree"

cd "$tree"
# The upstream tarball's package.m4 is 8 s newer than the configure, aclocal.m4 and Makefile.in generated from it,
# so make would run automake (Debian's build regenerates them all with autoreconf): give the generated files one
# common current time instead of needing autoconf, automake and libtool.
now=$(date +%s)
find . -name Makefile.in -exec touch -d "@$now" aclocal.m4 configure config.h.in {} +
# Debian's configure options (debian/rules) without DPDK; prefix = the cache, so that ovsdb-tool and friends look for
# the schema in it; the run/db/log directories are the test bed's own (OVS_RUNDIR etc., --db, -t).
nice -n 19 ./configure --prefix="$cache" --localstatedir=/var --sysconfdir=/etc --enable-ssl --disable-libcapng \
  --disable-afxdp >>"$log" 2>&1 || fail "configure failed: $(tail -n 3 "$log" | tr '\n' ' ')"
targets=(vswitchd/ovs-vswitchd ovsdb/ovsdb-server ovsdb/ovsdb-tool utilities/ovs-vsctl utilities/ovs-appctl
  utilities/ovs-ofctl utilities/ovs-dpctl vswitchd/vswitch.ovsschema)
# make of single targets does not build the generated headers first ($(BUILT_SOURCES), as `make all` does): an
# extra makefile on stdin names them as one goal
printf 'oeip-built-sources: $(BUILT_SOURCES)\n' | nice -n 19 make -j2 -f Makefile -f - oeip-built-sources >>"$log" 2>&1 ||
  fail "make of the generated sources failed: $(grep -m1 -E ' error: |\*\*\*' "$log" || tail -n 1 "$log")"
nice -n 19 make -j2 "${targets[@]}" >>"$log" 2>&1 || fail "make failed: $(grep -m1 -E ' error: |\*\*\*' "$log" || tail -n 1 "$log")"

mkdir -p "$(dirname "$schema")"
for t in "${targets[@]}"; do
  case $t in
  *.ovsschema) install -m 0644 "$t" "$schema.tmp" && mv "$schema.tmp" "$schema" ;;
  *) install -m 0755 "$t" "$bin/$(basename "$t").tmp" && mv "$bin/$(basename "$t").tmp" "$bin/$(basename "$t")" ;;
  esac
done
got=$("$bin/ovs-vswitchd" --version | head -n1)
[[ $got == *" $UPSTREAM" ]] || fail "built ovs-vswitchd reports '$got', not $UPSTREAM"
cd /
rm -rf "$src" "$apt"
echo "$V" >"$bin/.stamp"
echo "build-ovs: $got built" >&2
echo "$bin"

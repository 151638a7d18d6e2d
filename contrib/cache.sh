# Sourced by the build scripts of the per-machine cache (contrib/build-kube.sh, contrib/build-helm.sh).
# cache_reuse_or_lock BIN CACHE: when the caller's `cached` says BIN is built, prints BIN and exits 0; otherwise takes
# CACHE/.lock (fd 9, held until the script exits; concurrent callers wait) and checks again, since another caller may
# have built it meanwhile. Returns with the lock held when the caller must build.
cache_reuse_or_lock() {
  local bin=$1 cache=$2
  if cached; then echo "$bin"; exit 0; fi
  mkdir -p "$bin"
  exec 9>"$cache/.lock"
  flock 9
  if cached; then echo "$bin"; exit 0; fi
}

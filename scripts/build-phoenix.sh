#!/usr/bin/env bash
# Builds Phoenix 2.0, the MapReduce peer of `ochre bench mr`, from the project's copy of its
# sources (../shared/peers/phoenix-2.0.tar.gz, or $PHOENIX_TARBALL) into target/phoenix/, and
# installs the allocators the benchmark preloads into it (jemalloc, mimalloc) when it can.
#
# - Built serially (make -j1: the machine is shared) with TIMING defined, so that each
#   application prints its MapReduce library time on stderr (`library: MICROSECONDS`), which is
#   what the benchmark reads: like ochre's figure, it leaves out reading the input and printing.
# - word_count prints only its final sort's library time; one line is added after its
#   map_reduce call to print that job's time as `mapreduce: MICROSECONDS`.
# - kmeans and pca generate their data from rand(); scripts/phoenix-inputs.patch gives each a
#   `-f FILE` option that reads the file `ochre mr gen` writes (same points, same matrix), and
#   makes pca's covariance loop over the columns, as the comment in its source says it should
#   (and as ochre's does), so that both systems compute the same thing.
# - The tarball's reverse_index is Phoenix 1's sample (sample_apps/, for Phoenix 1's Solaris
#   scheduler); the patch adds it to tests/ ported to Phoenix 2.0's interface (map_reduce_init,
#   map_reduce, an iterator in reduce, its library time printed like the others), its
#   link-finding map unchanged.
#
# OCHRE_NO_APT=1 keeps it from installing the allocators (`ochre study --no-install-peers`).
# A missing tarball, compiler or package manager is reported; the benchmark then skips the
# Phoenix systems with a note. Run again to rebuild from scratch.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
tarball=${PHOENIX_TARBALL:-$root/../shared/peers/phoenix-2.0.tar.gz}
out=$root/target/phoenix

if [[ ! -f $tarball ]]; then
    echo "build-phoenix: no Phoenix sources at $tarball; the Phoenix systems are skipped" >&2
    exit 1
fi
command -v make >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 || {
    echo "build-phoenix: needs make and gcc" >&2
    exit 1
}
rm -rf "$out"
mkdir -p "$out"
tar xzf "$tarball" -C "$out" || exit 1
src=$out/phoenix-2.0
wc=$src/tests/word_count/word_count.c
# After `library_time += time_diff (&end, &begin);` (inside #ifdef TIMING), print it.
sed -i 's|^\( *\)library_time += time_diff (&end, &begin);|&\n\1fprintf (stderr, "mapreduce: %u\\n", library_time);|' "$wc"
grep -q 'mapreduce: %u' "$wc" || {
    echo "build-phoenix: could not patch $wc" >&2
    exit 1
}
patch -s -d "$src" -p1 <"$root/scripts/phoenix-inputs.patch" || {
    echo "build-phoenix: could not apply scripts/phoenix-inputs.patch" >&2
    exit 1
}
(cd "$src" && make -j1 DEBUG=-DTIMING >"$out/build.log" 2>&1) || {
    echo "build-phoenix: make failed; see $out/build.log" >&2
    exit 1
}
for app in word_count histogram linear_regression kmeans pca string_match matrix_multiply \
    reverse_index; do
    [[ -x $src/tests/$app/$app ]] || echo "build-phoenix: $app was not built" >&2
done

# The allocators preloaded into Phoenix (thesis Fig 5.21 compares allocators under it).
need=()
ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 >/dev/null 2>&1 || need+=(libjemalloc2)
ls /usr/lib/x86_64-linux-gnu/libmimalloc.so.2* >/dev/null 2>&1 || need+=(libmimalloc2.0)
if ((${#need[@]} > 0)); then
    if [[ -n ${OCHRE_NO_APT:-} ]]; then
        echo "build-phoenix: not installing ${need[*]} (OCHRE_NO_APT is set); skipped" >&2
    elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q --no-install-recommends \
            "${need[@]}" >/dev/null 2>&1 \
            || echo "build-phoenix: could not install ${need[*]}; those systems are skipped" >&2
    else
        echo "build-phoenix: cannot install ${need[*]} (needs root and apt-get); skipped" >&2
    fi
fi
echo "build-phoenix: built in $src" >&2

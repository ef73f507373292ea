# pyref.sh is sourced by the scripts/fetch-<name>.sh that install the Python references the
# tests compare stx with (Jinja2, huggingface_hub, TensorBoard, Math-Verify).
#
# pyref_install NAME DIR CHECK PIN... installs the pinned packages with `pip install --target`
# into a temporary directory beside DIR, checks them with the Python code CHECK, and moves the
# result into DIR whole, with the pins in DIR/.stx-pins: nothing goes into the user's Python,
# an interrupted install leaves no half-filled DIR, and a run once the pins are there (and
# CHECK passes) does nothing. A DIR holding files that are not such an install is refused.
# DIR defaults to $STX_CACHE_DIR/pyref/NAME, else ${XDG_CACHE_HOME:-~/.cache}/stx/pyref/NAME,
# where internal/pyref looks for it.
pyref_install() {
	local name=$1 dir=$2 check=$3
	shift 3
	local pins="$*"
	if [ -z "$dir" ]; then
		dir="${STX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stx}/pyref/$name"
	fi
	local python
	python=$(command -v python3 || command -v python || true)
	if [ -z "$python" ]; then
		echo "fetch-$name: python3 with pip is needed" >&2
		return 1
	fi
	if [ -f "$dir/.stx-pins" ] && [ "$(cat "$dir/.stx-pins")" = "$pins" ] &&
		PYTHONPATH="$dir" "$python" -c "$check" 2>/dev/null; then
		echo "fetch-$name: $pins already in $dir"
		return 0
	fi
	if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -e "$dir/.stx-pins" ]; then
		echo "fetch-$name: $dir holds other files; give an empty or new directory" >&2
		return 1
	fi
	local parent tmp
	parent=$(dirname "$dir")
	mkdir -p "$parent"
	tmp=$(mktemp -d "$parent/.fetch-$name-XXXXXX")
	echo "fetch-$name: installing $pins"
	if ! PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check --no-input \
		--no-warn-script-location --target "$tmp" "$@" ||
		! PYTHONPATH="$tmp" "$python" -c "$check"; then
		rm -rf "$tmp"
		return 1
	fi
	echo "$pins" >"$tmp/.stx-pins"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	echo "fetch-$name: installed $pins in $dir"
}

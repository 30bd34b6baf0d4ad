# lib.sh — what the benchmark scripts share; sourced, not run.
#
# kvtierd_start BIN DIR FLAGS...: starts BIN on runtime dir DIR (log in
# DIR/log) and waits, at most 120 s, for its "ready:" line; sets PID. The
# caller's EXIT trap stops it with kvtierd_stop.
kvtierd_start() {
	_bin=$1 _dir=$2
	shift 2
	"$_bin" --runtime-dir "$_dir" --http 127.0.0.1:0 "$@" 2>"$_dir/log" &
	PID=$!
	_i=0
	until grep -q "ready:" "$_dir/log"; do
		_i=$((_i + 1))
		if [ $_i -ge 1200 ] || ! kill -0 "$PID" 2>/dev/null; then
			cat "$_dir/log" >&2
			return 1
		fi
		sleep 0.1
	done
}

# kvtierd_port LOG: the control plane's port from the "ready:" line of LOG.
kvtierd_port() {
	sed -n 's|.*ready: control plane on http://.*:\([0-9]*\)/,.*|\1|p' "$1"
}

kvtierd_stop() {
	[ -n "${PID:-}" ] || return 0
	kill "$PID" 2>/dev/null
	wait "$PID" 2>/dev/null
	PID=
}

# carried_env DIR: binaries, libraries and libkvtier from a folder of bench/carry.sh
# (the GPU machine has none of our packages); sets BIN.
carried_env() {
	BIN=$1/bin
	export LD_LIBRARY_PATH="$1/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export KVTIER_LIBRARY="$1/lib/libkvtier.so.0"
}

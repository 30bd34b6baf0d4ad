# lib.sh — what the benchmark scripts share; sourced, not run.
#
# kvtierd_start BIN DIR FLAGS...: starts BIN on runtime dir DIR (log in
# DIR/log) and waits, at most 120 s, for its "ready:" line; sets PID. The
# caller's EXIT trap stops it with kvtierd_stop. The log is emptied here,
# before the fork: the background child truncates it only when it gets to
# run, and until then a restart would find the last daemon's "ready:" line
# (and its port).
kvtierd_start() {
	_bin=$1 _dir=$2
	shift 2
	: >"$_dir/log"
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

# carried_run NAME CARRY-DIR RUN-PARENT: what a script run from a carried folder
# needs: carried_env, OUT (its results; a new dir under /tmp unless set), PY, and
# DIR, a runtime dir under RUN-PARENT that an EXIT trap removes with the daemon.
carried_run() {
	carried_env "$2"
	OUT=${OUT:-$(mktemp -d "/tmp/kvtier-$1.XXXXXX")}
	mkdir -p "$OUT"
	PY=${PYTHON:-python3}
	DIR=$(mktemp -d "$3/kvtier-$1-run.XXXXXX")
	trap 'kvtierd_stop; rm -rf "$DIR"' EXIT
}

# disk_ceiling DIR MIB: prints "GB/s source", the disk's O_DIRECT random reads of
# 18 MiB blocks at queue depth 32 on a MIB-MiB file in DIR (fio, else the
# ceilings tool uring_read that bench/carry.sh builds); nothing without either.
disk_ceiling() {
	if command -v fio >/dev/null; then
		fio --name=c --filename="$1/fio" --size="$2"M --rw=randread --bs=18874368 --iodepth=32 \
			--ioengine=io_uring --direct=1 --output-format=json 2>/dev/null |
			python3 -c 'import json,sys; print("%.2f fio" % (json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e9))'
		rm -f "$1/fio"
	elif [ -x "${BIN:-}/uring_read" ]; then
		"$BIN/uring_read" "$1/uring" "$2" 2>&1 |
			sed -n 's/^read bs= *18432KiB qd=32: .* rand \([0-9.]*\) GB\/s.*/\1 uring_read/p'
		rm -f "$1/uring"
	fi
}

#!/bin/sh
# deploy.sh — deploy/ checked offline: YAML lint; the Kustomize base and
# overlays rendered by kubectl and every object as the API server would get
# it against its schemas, and the chart's values (tests/deploy/validate.py); the ConfigMaps hold exactly
# deploy/config/kvtierd.json and the seccomp profile; every config key and
# flag in the manifests, the chart, the unit and the image is one that
# `kvtierd --help` lists; the systemd unit passes systemd-analyze verify; and
# every file the Dockerfile copies out of `make install` exists there.
. "${KVT_SRCDIR:-$(dirname "$0")/../..}/tests/integration/lib.sh"
SRC=${KVT_SRCDIR:-$(dirname "$0")/../..}
DEP=$SRC/deploy
BUILD=${KVT_BUILDDIR:-.}

# --- YAML lint (the chart's templates are Go templates, not YAML) ---
check "yamllint passes on deploy/k8s and the chart's Chart.yaml and values.yaml" \
	yamllint -s -c "$SRC/tests/deploy/yamllint.yaml" \
	"$DEP"/k8s/base/*.yaml "$DEP"/k8s/overlays/*/*.yaml "$DEP/helm/kvtier/Chart.yaml" \
	"$DEP/helm/kvtier/values.yaml"

# --- schemas (Kubernetes API, Prometheus Operator) and the chart's values ---
VENV=$(KVT_VENV_ROOT=${KVT_VENV_ROOT:-$BUILD/venv} sh "$SRC/scripts/venv.sh" deploy) ||
	not_ok "the deploy virtual environment (scripts/venv.sh deploy)"
"$VENV/bin/python" "$SRC/tests/deploy/validate.py" "$DEP" >"$TMP/validate.out" 2>&1
rc=$?
cat "$TMP/validate.out"
check "every object of deploy/ is valid against the API schemas, and the chart's values cover its templates" \
	test $rc -eq 0

# --- one config, one seccomp profile ---
inline() { # inline FILE: the block under "kvtierd.json: |", unindented
	awk '/kvtierd.json: \|/ {on = 1; next} on && /^[^ ]/ {on = 0} on && /^---/ {on = 0} on' "$1" |
		sed 's/^    //'
}
inline "$DEP/k8s/base/configmap.yaml" >"$TMP/cm.json"
check "k8s/base/configmap.yaml holds deploy/config/kvtierd.json" cmp -s "$TMP/cm.json" "$DEP/config/kvtierd.json"
inline "$DEP/k8s/overlays/l3/configmap-l3.yaml" >"$TMP/cm-l3.json"
check "k8s/overlays/l3/configmap-l3.yaml holds deploy/config/kvtierd.json and the l3 keys" python3 -c "
import json, sys
base, l3 = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
sys.exit(0 if {k: v for k, v in l3.items() if not k.startswith('l3-')} == base and 'l3-path' in l3 else 1)
" "$DEP/config/kvtierd.json" "$TMP/cm-l3.json"
inline "$DEP/k8s/base/seccomp-installer.yaml" >"$TMP/sc.json"
check "seccomp-installer.yaml holds k8s/base/seccomp/kvtierd.json" cmp -s "$TMP/sc.json" "$DEP/k8s/base/seccomp/kvtierd.json"
check "the seccomp profile is JSON and does not refuse io_uring" python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))
denied = {n for s in p['syscalls'] if s['action'] != 'SCMP_ACT_ALLOW' for n in s['names']}
sys.exit(1 if p['defaultAction'] != 'SCMP_ACT_ALLOW' or denied & {'io_uring_setup', 'io_uring_enter', 'io_uring_register'} else 0)
" "$DEP/k8s/base/seccomp/kvtierd.json"

# --- keys and flags against kvtierd --help ---
"$KVTIERD" --help | grep -o -- '--[a-z0-9-]*' | sed 's/^--//' | sort -u >"$TMP/help"
python3 -c "import json, sys; print('\n'.join(json.load(open(sys.argv[1]))))" \
	"$DEP/config/kvtierd.json" >"$TMP/keys"
grep -o '^ *"[a-z0-9-]*":' "$DEP/helm/kvtier/templates/configmap.yaml" | tr -d ' ":' >>"$TMP/keys"
python3 -c "import json, sys; print('\n'.join(json.load(open(sys.argv[1]))))" "$TMP/cm-l3.json" >>"$TMP/keys"
sort -u "$TMP/keys" -o "$TMP/keys"
unknown=$(comm -23 "$TMP/keys" "$TMP/help" | tr '\n' ' ')
check "every config key in deploy/ is a kvtierd option${unknown:+ (unknown: $unknown)}" test -z "$unknown"
check "the chart's config has the keys of deploy/config/kvtierd.json, and L3's" sh -c "
	python3 -c \"import json; print('\\\\n'.join(sorted(json.load(open('$DEP/config/kvtierd.json')))))\" >'$TMP/k1'
	grep -o '^ *\"[a-z0-9-]*\":' '$DEP/helm/kvtier/templates/configmap.yaml' | tr -d ' \":' |
		grep -v '^l3-' | sort >'$TMP/k2'
	cmp -s '$TMP/k1' '$TMP/k2' && grep -q '\"l3-path\"' '$DEP/helm/kvtier/templates/configmap.yaml'"
{
	grep -h -o -- '"--[a-z0-9-]*"' "$DEP/k8s/base/vllm-deployment.yaml" "$DEP/helm/kvtier/templates/deployment.yaml" \
		"$DEP/docker/Dockerfile" | tr -d '"'
	grep '^ExecStart=' "$DEP/systemd/kvtierd.service.in" | grep -o -- '--[a-z0-9-]*'
} | sed 's/^--//' | sort -u >"$TMP/flags"
check "the manifests pass kvtierd flags (found $(wc -l <"$TMP/flags"))" test -s "$TMP/flags"
unknown=$(comm -23 "$TMP/flags" "$TMP/help" | tr '\n' ' ')
check "every kvtierd flag in deploy/ is one --help lists${unknown:+ (unknown: $unknown)}" test -z "$unknown"

# --- the systemd unit as make install (default prefix) installs it ---
make -s -C "$BUILD" install DESTDIR="$TMP/local" >"$TMP/install-local.out" 2>&1 ||
	{ tail "$TMP/install-local.out"; not_ok "make install DESTDIR (default prefix)"; }
UNIT=$(find "$TMP/local" -path '*/lib/systemd/system/kvtierd.service')
check "make install installs the unit" test -n "$UNIT"
EXE=$(sed -n 's|^ExecStart=\([^ ]*\) .*|\1|p' "$UNIT")
check "the installed unit's ExecStart ($EXE) is where make install put kvtierd" test -x "$TMP/local$EXE"
check "make install installs the sysusers.d and tmpfiles.d snippets" \
	sh -c "find '$TMP/local' -path '*/lib/sysusers.d/kvtier.conf' | grep -q . &&
		find '$TMP/local' -path '*/lib/tmpfiles.d/kvtier.conf' | grep -q ."
sed "s|$EXE|$TMP/local$EXE|" "$UNIT" >"$TMP/kvtierd.service"
systemd-analyze verify --man=no "$TMP/kvtierd.service" >"$TMP/verify.out" 2>&1
rc=$?
cat "$TMP/verify.out"
check "systemd-analyze verify passes the installed unit, without a warning" \
	sh -c "[ $rc -eq 0 ] && ! [ -s '$TMP/verify.out' ]"

# --- what the image copies out of make install ---
make -s -C "$BUILD" install DESTDIR="$TMP/inst" prefix=/usr >"$TMP/install.out" 2>&1 ||
	{ tail "$TMP/install.out"; not_ok "make install DESTDIR"; }
# ... and /opt/kvtier as the Dockerfile's build stage makes it: the wheel, and
# the package installed from it for the stock vLLM image's PYTHONPATH (the
# pod's kvtier-python init container copies it there).
# (Not from a sanitized build: its libkvtier wants the ASan runtime first in the process.)
if ldd "$BUILD/.libs/libkvtier.so.0" 2>/dev/null | grep -q libasan; then
	mkdir -p "$TMP/inst/opt/kvtier"
elif KVT_VENV_ROOT=${KVT_VENV_ROOT:-$BUILD/venv} sh "$SRC/scripts/wheel.sh" "$BUILD" \
	"$TMP/inst/opt/kvtier/wheel" "$TMP/inst/opt/kvtier/python" >/dev/null 2>"$TMP/wheel.err"; then
	check "the package on a bare PYTHONPATH (the pod's kvtier-python volume) loads its bundled library" \
		env -u KVT_BUILDDIR -u KVTIER_LIBRARY PYTHONPATH="$TMP/inst/opt/kvtier/python" python3 -c '
import kvtier, os, sys
lib = os.path.realpath(kvtier._lib.lib._name)
sys.exit(0 if lib == os.path.join(os.path.dirname(os.path.realpath(kvtier.__file__)), "libkvtier.so.0") else 1)'
else
	cat "$TMP/wheel.err"
	not_ok "scripts/wheel.sh makes the wheel the image carries"
fi
for path in $(sed -n 's|^COPY --from=build /out\(/[^ ]*\) .*|\1|p' "$DEP/docker/Dockerfile"); do
	check "make install has $path, which the Dockerfile copies" test -e "$TMP/inst$path"
done
finish

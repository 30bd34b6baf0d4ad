/* settings.c — see settings.h. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvtier/kvtier.h"
#include "ns.h"
#include "runtime.h"
#include "settings.h"

enum opt_type {
	OPT_STRING,
	OPT_PATH,
	OPT_LISTEN,
	OPT_SIZE,
	OPT_UINT,
	OPT_FRACTION,
	OPT_BOOL,
	OPT_LOGLEVEL,
};

struct option_def {
	const char *name;        /* long flag and JSON key */
	int short_name;          /* 0 when none */
	enum opt_type type;
	size_t offset;           /* into struct kvtd_config */
	const char *def;         /* default, parsed like a flag; NULL: computed or unset */
	const char *def_help;    /* shown instead of def */
	uint64_t min, max;       /* bounds of SIZE and UINT values */
	bool live;               /* SIGHUP applies it without a restart, through policy.h */
	const char *metavar;
	const char *help;
};

#define OFF(field) offsetof(struct kvtd_config, field)

static const struct option_def options[] = {
	{"config", 'c', OPT_PATH, OFF(config_file), NULL, "none", 0, 0, false, "FILE",
	 "JSON config file whose keys are these long option names; flags override it"},
	{"runtime-dir", 0, OPT_PATH, OFF(runtime_dir), NULL,
	 "/run/kvtier as root, else $XDG_RUNTIME_DIR/kvtier, else /tmp/kvtier-UID", 0, 0,
	 false, "DIR", "directory for the socket and state; created when missing"},
	{"socket", 's', OPT_PATH, OFF(socket_path), NULL, "RUNTIME-DIR/kvtierd.sock", 0, 0,
	 false, "PATH", "data-plane Unix socket"},
	{"http", 0, OPT_LISTEN, OFF(http_listen), "127.0.0.1:8470", NULL, 0, 0, false,
	 "ADDR:PORT", "control-plane HTTP listen address; port 0 picks a free one"},
	{"http-hosts", 0, OPT_STRING, OFF(http_hosts), NULL,
	 "none: IP addresses and localhost only", 0, 0, false, "NAMES",
	 "comma-separated host names the control plane answers to as well (a Service's DNS name): a request whose Host header is another name is refused (403), as a browser's whose Origin is not the request's own host"},
	{"admin-token-file", 0, OPT_PATH, OFF(admin_token_file), NULL, "none: mutating endpoints open",
	 0, 0, false, "FILE",
	 "file holding the bearer token that PUT, POST and DELETE on the control plane need"},
	{"l1-size", 0, OPT_SIZE, OFF(l1_size), NULL, "1 GiB, or a quarter of memory if less",
	 1u << 20, UINT64_MAX, false, "SIZE", "bytes of DRAM for the L1 tier"},
	{"l1-region-size", 0, OPT_SIZE, OFF(l1_region_size), NULL,
	 "l1-size/16 as a power of two, within 4 MiB..256 MiB", 1u << 20, UINT64_C(1) << 32,
	 false, "SIZE", "L1 region size: the largest block that fits, and the unit that moves between block sizes"},
	{"l1-hugepages", 0, OPT_BOOL, OFF(l1_hugepages), "false", NULL, 0, 0, false, NULL,
	 "back L1 with hugetlb pages when available (else transparent hugepages)"},
	{"l1-pin", 0, OPT_BOOL, OFF(l1_pin), "true", NULL, 0, 0, false, NULL,
	 "pin L1 for DMA (cudaHostRegister) when a GPU is present; failing to pin stops the daemon"},
	{"l1-high-watermark", 0, OPT_FRACTION, OFF(l1_high_watermark), "0.95", NULL, 0, 0,
	 true, "FRACTION", "L1 usage that starts eviction; 1 turns watermark eviction off"},
	{"l1-low-watermark", 0, OPT_FRACTION, OFF(l1_low_watermark), "0.90", NULL, 0, 0,
	 true, "FRACTION", "L1 usage that eviction brings usage back down to"},
	{"max-connections", 0, OPT_UINT, OFF(max_connections), "1024", NULL, 1, 65536, false,
	 "N", "data-plane connections (lanes) open at once, across all clients"},
	{"copy-threads", 0, OPT_UINT, OFF(copy_threads), NULL, "the number of CPUs", 1, 256,
	 false, "N", "threads of the host copy engine"},
	{"max-leases", 0, OPT_UINT, OFF(max_leases), "65536", NULL, 1, 1u << 24, false, "N",
	 "leases held at once, across all clients"},
	{"lease-max-ms", 0, OPT_UINT, OFF(lease_max_ms), "30000", NULL, 1, 3600000, true,
	 "MS", "longest lease a lookup can take; longer requests are cut to it"},
	{"lease-default-ms", 0, OPT_UINT, OFF(lease_default_ms), "5000", NULL, 1, 3600000, true,
	 "MS", "lease a lookup gets when it asks for the default (KVT_LEASE_DEFAULT)"},
	{"max-namespaces-per-client", 0, OPT_UINT, OFF(max_namespaces_per_client), "16", NULL, 1,
	 KVT_NS_MAX, false, "N",
	 "namespaces one client (session) may create; HELLOs past it get KVT_ENSLIMIT"},
	{"max-connections-per-uid", 0, OPT_UINT, OFF(max_connections_per_uid), "512", NULL, 1,
	 65536, false, "N",
	 "data-plane connections the processes of one uid may hold at once (SO_PEERCRED); past it a connection is closed at once"},
	{"max-namespaces-per-uid", 0, OPT_UINT, OFF(max_namespaces_per_uid), "64", NULL, 1,
	 KVT_NS_MAX, false, "N",
	 "namespaces the clients of one uid may have created and not yet reclaimed; HELLOs past it get KVT_ENSLIMIT"},
	{"max-buffers-per-uid", 0, OPT_UINT, OFF(max_buffers_per_uid), "1024", NULL, 1, 4096,
	 false, "N", "staging buffers the clients of one uid may hold registered (the daemon's table has 4096)"},
	{"max-buffer-size", 0, OPT_SIZE, OFF(max_buffer_size), "16GiB", NULL, 4096, UINT64_MAX,
	 false, "SIZE", "largest shared-memory staging buffer a client may register (-EFBIG past it)"},
	{"max-buffer-bytes-per-uid", 0, OPT_SIZE, OFF(max_buffer_bytes_per_uid), "64GiB", NULL,
	 4096, UINT64_MAX, false, "SIZE",
	 "shared-memory staging buffer bytes the clients of one uid may hold registered (-EDQUOT past it): the daemon's copies touch their pages"},
	{"max-leased-bytes-per-uid", 0, OPT_SIZE, OFF(max_leased_bytes_per_uid), NULL,
	 "half of l1-size", 0, UINT64_MAX, false, "SIZE",
	 "L1 bytes the leases of one uid's clients may pin at once; a LOOKUP past it is answered without a lease"},
	{"hello-timeout-ms", 0, OPT_UINT, OFF(hello_timeout_ms), "5000", NULL, 100, 3600000,
	 false, "MS",
	 "how long a new data-plane connection may go without its HELLO before it is closed; at max-connections the oldest connection still without one is closed to make room"},
	{"namespace-l1-quota", 0, OPT_SIZE, OFF(namespace_l1_quota), "0", NULL, 0, UINT64_MAX,
	 false, "SIZE",
	 "L1 bytes each new namespace may hold (PUT /v1/namespaces/ID changes one); past it the namespace evicts its own least-recent blocks; 0: no quota"},
	{"namespace-l2-quota", 0, OPT_SIZE, OFF(namespace_l2_quota), "0", NULL, 0, UINT64_MAX,
	 false, "SIZE",
	 "L2 bytes each new namespace may hold; past it the namespace drops its own oldest L2 items; 0: no quota"},
	{"l2-path", 0, OPT_PATH, OFF(l2_path), NULL, "none: no L2 tier", 0, 0, false, "PATH",
	 "file or block device for the L2 tier (created when missing, opened with O_DIRECT)"},
	{"l2-size", 0, OPT_SIZE, OFF(l2_size), "0", NULL, 0, UINT64_MAX, false, "SIZE",
	 "hard cap on the bytes L2 occupies; 0: the size of an existing file or device"},
	{"l2-region-size", 0, OPT_SIZE, OFF(l2_region_size), "0", NULL, 0, 1u << 30, false,
	 "SIZE", "L2 region size, the largest item L2 takes and the unit it reclaims; 0: l2-size/32 within 8 MiB..256 MiB"},
	{"l2-queue-depth", 0, OPT_UINT, OFF(l2_queue_depth), "64", NULL, 1, 4096, false, "N",
	 "L2 reads and writes in flight at once (io_uring queue depth)"},
	{"store-wait-ms", 0, OPT_UINT, OFF(store_wait_ms), "1000", NULL, 0, 3600000, true, "MS",
	 "evict mode: how long a STORE block whose slot would evict a dirty L1 item (not yet written to L2) waits for the writer; past it the item is evicted and, if L2 is behind, dropped; 0: never wait (drop)"},
	{"stop-flush-ms", 0, OPT_UINT, OFF(stop_flush_ms), "20000", NULL, 0, 3600000, false, "MS",
	 "at a stop (SIGTERM, SIGINT), how long kvtierd goes on writing dirty L1 items to L2 before it exits; what is left is lost"},
	{"l2-write-buffers", 0, OPT_UINT, OFF(l2_write_buffers), "4", NULL, 2, 64, false, "N",
	 "regions of L2 filled at once: the record headers of blocks written from their L1 slots, and the copied blocks of victims evicted dirty"},
	{"l3-path", 0, OPT_PATH, OFF(l3_path), NULL, "none: no L3 tier", 0, 0, false, "DIR",
	 "directory on a file system the kvtierd of many nodes share (NFS, CephFS, Lustre, ...) for the L3 tier: one file per block part, published by link, read and verified on L1 and L2 misses; it must exist and be writable"},
	{"l3-key-file", 0, OPT_PATH, OFF(l3_key_file), NULL, "none: parts unsigned", 0, 0, false,
	 "FILE",
	 "file holding the L3 cluster key (32 to 4096 raw bytes, the same on every node): this node signs what it publishes (HMAC-SHA256) and serves only parts whose signature verifies"},
	{"l3-size", 0, OPT_SIZE, OFF(l3_size), "0", NULL, 0, UINT64_MAX, false, "SIZE",
	 "cap on the bytes of L3 files, all nodes together: past it each node removes the oldest files (by modification time) when it walks the directory; 0: no cap"},
	{"namespace-l3-quota", 0, OPT_SIZE, OFF(namespace_l3_quota), "0", NULL, 0, UINT64_MAX,
	 false, "SIZE",
	 "L3 bytes one namespace's files may hold, every node's together (give every node the same): past it each node removes that namespace's oldest files when it walks, down to 95%; 0: no quota"},
	{"l3-queue-depth", 0, OPT_UINT, OFF(l3_queue_depth), "16", NULL, 1, 1024, false, "N",
	 "L3 publishes in flight at once (each pins its L1 part), and the io_uring's depth"},
	{"l3-op-timeout-ms", 0, OPT_UINT, OFF(l3_op_timeout_ms), "10000", NULL, 0, 3600000, false,
	 "MS", "how long one L3 file operation (an open, read, write, link, rename, statx) may take before it is cancelled: a read then fails (a miss, the LOAD answers), a publish fails and L3 is degraded as hung until a probe answers; a read whose cancel the kernel refuses (a hard NFS mount) is abandoned a second later, its LOAD answered without it; 0: no limit (a hung file system holds what waits on it)"},
	{"l3-scan-ms", 0, OPT_UINT, OFF(l3_scan_ms), "10000", NULL, 10, 3600000, false, "MS",
	 "how often this node walks L3: to account every node's files, enforce l3-size, remove dead publishers' temporaries and learn what other nodes published (for lookups)"},
	{"web-dir", 0, OPT_PATH, OFF(web_dir), NULL,
	 "the installed share/kvtier/web, else the source tree's web/", 0, 0, false, "DIR",
	 "directory of the dashboard's files, served at /"},
	{"log-level", 0, OPT_LOGLEVEL, OFF(log_level), "info", NULL, 0, 0, true, "LEVEL",
	 "error, warn, info or debug"},
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))
#define OPT_HELP_ID 1000
#define OPT_VERSION_ID 1001

static void *field(struct kvtd_config *cfg, const struct option_def *o)
{
	return (char *)cfg + o->offset;
}

static const void *cfield(const struct kvtd_config *cfg, const struct option_def *o)
{
	return (const char *)cfg + o->offset;
}


int kvtd_parse_listen(const char *text, char *host, size_t hostlen, uint16_t *port)
{
	const char *colon;
	const char *h = text;
	size_t hlen;
	if (*text == '[') {
		const char *close = strchr(text, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		h = text + 1;
		hlen = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(text, ':');
		if (!colon || strchr(text, ':') != colon)
			return -EINVAL;
		hlen = (size_t)(colon - text);
	}
	if (hlen == 0 || hlen >= hostlen)
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long p = strtoul(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end || errno || p > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* Parses text for option o into cfg; where names the source for messages. */
static int set_from_text(struct kvtd_config *cfg, const struct option_def *o,
			 const char *text, const char *where, char *err, size_t errlen)
{
	void *f = field(cfg, o);
	uint64_t u;
	char *end;
	switch (o->type) {
	case OPT_LISTEN: {
		char host[256];
		uint16_t port;
		if (kvtd_parse_listen(text, host, sizeof(host), &port))
			return kvt_fail(err, errlen, -EINVAL, "%s: bad address '%s': use ADDR:PORT or [IPV6]:PORT",
				    where, text);
	}
		/* fall through */
	case OPT_STRING:
	case OPT_PATH: {
		if (*text == '\0')
			return kvt_fail(err, errlen, -EINVAL, "%s: must not be empty", where);
		char *copy = strdup(text);
		if (!copy)
			return kvt_fail(err, errlen, -EINVAL, "%s: out of memory", where);
		free(*(char **)f);
		*(char **)f = copy;
		return 0;
	}
	case OPT_SIZE: {
		if (*text == '-')
			return kvt_fail(err, errlen, -EINVAL, "%s: a size cannot be negative ('%s')", where, text);
		int rc = kvt_parse_size(text, &u);
		if (rc == -ERANGE)
			return kvt_fail(err, errlen, -EINVAL, "%s: size '%s' is too large", where, text);
		if (rc)
			return kvt_fail(err, errlen, -EINVAL,
				    "%s: bad size '%s': use bytes or a whole number with KiB, MiB, GiB, TiB, KB, MB, GB or TB",
				    where, text);
		goto bounds;
	}
	case OPT_UINT:
		errno = 0;
		u = strtoull(text, &end, 10);
		if (*text == '-')
			return kvt_fail(err, errlen, -EINVAL, "%s: '%s' is negative; give a whole number >= %" PRIu64,
				    where, text, o->min);
		if (!*text || *end || errno)
			return kvt_fail(err, errlen, -EINVAL, "%s: '%s' is not a whole number", where, text);
		goto bounds;
	case OPT_FRACTION: {
		errno = 0;
		double d = strtod(text, &end);
		if (!*text || *end || errno || !(d > 0.0 && d <= 1.0))
			return kvt_fail(err, errlen, -EINVAL, "%s: '%s' is not a fraction in (0, 1]", where, text);
		*(double *)f = d;
		return 0;
	}
	case OPT_BOOL:
		if (strcmp(text, "true") == 0)
			*(bool *)f = true;
		else if (strcmp(text, "false") == 0)
			*(bool *)f = false;
		else
			return kvt_fail(err, errlen, -EINVAL, "%s: '%s' is not true or false", where, text);
		return 0;
	case OPT_LOGLEVEL:
		if (kvt_log_level_parse(text, (enum kvt_log_level *)f))
			return kvt_fail(err, errlen, -EINVAL,
				    "%s: unknown level '%s': use error, warn, info or debug",
				    where, text);
		return 0;
	}
	return kvt_fail(err, errlen, -EINVAL, "%s: unhandled option type", where);
bounds:
	if (u < o->min || u > o->max)
		return kvt_fail(err, errlen, -EINVAL, "%s: %" PRIu64 " is outside %" PRIu64 "..%" PRIu64,
			    where, u, o->min, o->max);
	*(uint64_t *)f = u;
	return 0;
}

static const struct option_def *find_option(const char *name)
{
	for (size_t i = 0; i < NOPTIONS; i++)
		if (strcmp(options[i].name, name) == 0)
			return &options[i];
	return NULL;
}

/* A JSON value as the text a flag would carry: numbers and bools as written. */
static int json_to_text(const json_t *v, const struct option_def *o, char *buf, size_t len)
{
	switch (json_typeof(v)) {
	case JSON_STRING:
		if (o->type == OPT_BOOL || o->type == OPT_FRACTION || o->type == OPT_UINT)
			return -EINVAL;
		snprintf(buf, len, "%s", json_string_value(v));
		return 0;
	case JSON_INTEGER:
		if (o->type != OPT_SIZE && o->type != OPT_UINT && o->type != OPT_FRACTION)
			return -EINVAL;
		if (json_integer_value(v) < 0)
			return -ERANGE;
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return 0;
	case JSON_REAL:
		if (o->type != OPT_FRACTION)
			return -EINVAL;
		/* The shortest text that reads back as the same double: -0.1, not -0.10000000000000001. */
		for (int digits = 1; digits <= 17; digits++) {
			snprintf(buf, len, "%.*g", digits, json_real_value(v));
			if (strtod(buf, NULL) == json_real_value(v))
				break;
		}
		return 0;
	case JSON_TRUE:
	case JSON_FALSE:
		if (o->type != OPT_BOOL)
			return -EINVAL;
		snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
		return 0;
	default:
		return -EINVAL;
	}
}

static const char *type_expected(const struct option_def *o)
{
	switch (o->type) {
	case OPT_SIZE: return "a size string like \"1GiB\" or a byte count";
	case OPT_UINT: return "a whole number";
	case OPT_FRACTION: return "a number in (0, 1]";
	case OPT_BOOL: return "true or false";
	default: return "a string";
	}
}

/* Opens the config file, saying plainly why not (missing, a directory, no permission). */
static FILE *open_config(const char *path, char *err, size_t errlen)
{
	struct stat st;
	if (stat(path, &st)) {
		kvt_fail(err, errlen, -EINVAL, "config file %s: %s", path, strerror(errno));
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		kvt_fail(err, errlen, -EINVAL, "config file %s: is %s, not a file", path,
		     S_ISDIR(st.st_mode) ? "a directory" : "a special file");
		return NULL;
	}
	FILE *f = fopen(path, "r");
	if (!f)
		kvt_fail(err, errlen, -EINVAL, "config file %s: %s", path, strerror(errno));
	return f;
}

static int load_file(struct kvtd_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = open_config(path, err, errlen);
	if (!f)
		return -EINVAL;
	json_error_t jerr;
	json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
	fclose(f);
	if (!root)
		return kvt_fail(err, errlen, -EINVAL, "config file %s: line %d column %d: %s", path,
			    jerr.line, jerr.column, jerr.text);
	int rc = 0;
	if (!json_is_object(root)) {
		rc = kvt_fail(err, errlen, -EINVAL, "config file %s: the top level must be a JSON object", path);
		goto out;
	}
	const char *key;
	json_t *value;
	json_object_foreach(root, key, value) {
		const struct option_def *o = find_option(key);
		char where[512], text[4096];
		snprintf(where, sizeof(where), "config file %s: key \"%s\"", path, key);
		if (!o || o->offset == OFF(config_file)) {
			rc = kvt_fail(err, errlen, -EINVAL, "%s: unknown key (see kvtierd --help)", where);
			goto out;
		}
		int conv = json_to_text(value, o, text, sizeof(text));
		if (conv == -ERANGE) {
			rc = kvt_fail(err, errlen, -EINVAL, "%s: %" JSON_INTEGER_FORMAT " is negative; expected %s",
				  where, json_integer_value(value), type_expected(o));
			goto out;
		}
		if (conv) {
			rc = kvt_fail(err, errlen, -EINVAL, "%s: expected %s", where, type_expected(o));
			goto out;
		}
		rc = set_from_text(cfg, o, text, where, err, errlen);
		if (rc)
			goto out;
	}
out:
	json_decref(root);
	return rc;
}

static int set_defaults(struct kvtd_config *cfg, char *err, size_t errlen)
{
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option_def *o = &options[i];
		if (o->def && set_from_text(cfg, o, o->def, o->name, err, errlen))
			return -EINVAL;
	}
	return 0;
}

/* The number in file (a cgroup limit), when it holds one below *limit. */
static void lower_to_file(const char *file, uint64_t *limit)
{
	FILE *f = fopen(file, "r");
	if (!f)
		return;
	uint64_t v;
	if (fscanf(f, "%" SCNu64, &v) == 1 && v < *limit) /* "max": no number, no limit */
		*limit = v;
	fclose(f);
}

/* A limit of the cgroup at dir/path or of any cgroup above it, in file. */
static void lower_to_tree(const char *dir, const char *path, const char *file, uint64_t *limit)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s", path);
	for (;;) {
		char f[4096 + 512];
		snprintf(f, sizeof(f), "%s%s/%s", dir, strcmp(p, "/") ? p : "", file);
		lower_to_file(f, limit);
		char *slash = strrchr(p, '/');
		if (!slash || slash == p) {
			if (strcmp(p, "/")) {
				snprintf(f, sizeof(f), "%s/%s", dir, file);
				lower_to_file(f, limit);
			}
			return;
		}
		*slash = '\0';
	}
}

/* Whether a /proc/self/cgroup controller list names the memory controller. */
static bool has_memory_controller(const char *list)
{
	size_t n = strlen("memory");
	for (const char *c = list; (c = strstr(c, "memory")); c += n)
		if ((c == list || c[-1] == ',') && (c[n] == '\0' || c[n] == ','))
			return true;
	return false;
}

uint64_t kvtd_memory_limit_in(const char *proc_cgroup, const char *cgroup_root, uint64_t physical)
{
	uint64_t limit = physical;
	char dir[4096];
	FILE *f = fopen(proc_cgroup, "r");
	char line[4096];
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *ctrl = strchr(line, ':'), *path = ctrl ? strchr(ctrl + 1, ':') : NULL;
		if (!path)
			continue;
		*ctrl++ = '\0';
		*path++ = '\0';
		if (strcmp(line, "0") == 0 && *ctrl == '\0') { /* v2: the unified tree */
			lower_to_tree(cgroup_root, path, "memory.max", &limit);
		} else if (has_memory_controller(ctrl)) {   /* v1: the memory hierarchy */
			snprintf(dir, sizeof(dir), "%s/memory", cgroup_root);
			lower_to_tree(dir, path, "memory.limit_in_bytes", &limit);
		}
	}
	if (f)
		fclose(f);
	/* A private cgroup namespace shows "/" but mounts the own cgroup as the root. */
	snprintf(dir, sizeof(dir), "%s/memory.max", cgroup_root);
	lower_to_file(dir, &limit);
	snprintf(dir, sizeof(dir), "%s/memory/memory.limit_in_bytes", cgroup_root);
	lower_to_file(dir, &limit);
	return limit;
}

uint64_t kvtd_memory_limit(void)
{
	return kvtd_memory_limit_in("/proc/self/cgroup", "/sys/fs/cgroup",
				    (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE));
}

static int default_runtime_dir(struct kvtd_config *cfg)
{
	char buf[4096];
	int err = kvt_default_runtime_dir(buf, sizeof(buf));
	if (err)
		return err;
	return (cfg->runtime_dir = strdup(buf)) ? 0 : -ENOMEM;
}

static int resolve_computed(struct kvtd_config *cfg, char *err, size_t errlen)
{
	if (!cfg->runtime_dir && default_runtime_dir(cfg))
		return kvt_fail(err, errlen, -EINVAL,
				"runtime-dir: the default ($XDG_RUNTIME_DIR/kvtier) is too long, or out of memory");
	if (!cfg->socket_path) {
		size_t n = strlen(cfg->runtime_dir) + sizeof("/kvtierd.sock");
		if (!(cfg->socket_path = malloc(n)))
			return kvt_fail(err, errlen, -EINVAL, "out of memory");
		snprintf(cfg->socket_path, n, "%s/kvtierd.sock", cfg->runtime_dir);
	}
	uint64_t mem = kvtd_memory_limit();
	if (!cfg->l1_size) {
		cfg->l1_size = UINT64_C(1) << 30;
		if (cfg->l1_size > mem / 4)
			cfg->l1_size = mem / 4;
	}
	if (!cfg->max_leased_bytes_per_uid)
		cfg->max_leased_bytes_per_uid = cfg->l1_size / 2;
	if (!cfg->copy_threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->copy_threads = n > 0 ? (uint64_t)n : 1;
	}
	if (!cfg->l1_region_size) {
		uint64_t r = UINT64_C(4) << 20;
		while (r * 2 <= cfg->l1_size / 16 && r < (UINT64_C(256) << 20))
			r *= 2;
		cfg->l1_region_size = r;
	}
	return 0;
}

enum kvtd_rule kvtd_check_rules(double high, double low, uint64_t lease_default_ms,
				uint64_t lease_max_ms)
{
	if (!(low < high))
		return KVTD_RULE_WATERMARK_ORDER;
	if (low < KVTD_WATERMARK_FLOOR)
		return KVTD_RULE_WATERMARK_FLOOR;
	if (lease_default_ms > lease_max_ms)
		return KVTD_RULE_LEASE_ORDER;
	return KVTD_RULES_HOLD;
}

/* A size for a message, rounded: "23.5 GiB" (kvt_format_size is exact, for values). */
static void about_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	unsigned u = 0;
	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, v == (double)(uint64_t)v ? "%.0f %s" : "%.1f %s", v, units[u]);
}

static int validate(const struct kvtd_config *cfg, char *err, size_t errlen)
{
	char a[64], b[64];
	uint64_t mem = kvtd_memory_limit();
	if (cfg->l1_size > mem) {
		about_size(cfg->l1_size, a, sizeof(a));
		about_size(mem, b, sizeof(b));
		return kvt_fail(err, errlen, -EINVAL, "l1-size: %s is more than the %s of memory this process may "
			    "use (physical memory or its cgroup's limit)", a, b);
	}
	if (cfg->l1_region_size % 4096)
		return kvt_fail(err, errlen, -EINVAL, "l1-region-size: must be a multiple of 4 KiB");
	if (cfg->l1_region_size > cfg->l1_size) {
		kvt_format_size(cfg->l1_region_size, a, sizeof(a));
		kvt_format_size(cfg->l1_size, b, sizeof(b));
		return kvt_fail(err, errlen, -EINVAL, "l1-region-size: %s is larger than l1-size %s", a, b);
	}
	switch (kvtd_check_rules(cfg->l1_high_watermark, cfg->l1_low_watermark,
				 cfg->lease_default_ms, cfg->lease_max_ms)) {
	case KVTD_RULE_WATERMARK_ORDER:
		return kvt_fail(err, errlen, -EINVAL,
			    "l1-low-watermark: %.3g must be below l1-high-watermark %.3g",
			    cfg->l1_low_watermark, cfg->l1_high_watermark);
	case KVTD_RULE_WATERMARK_FLOOR:
		return kvt_fail(err, errlen, -EINVAL,
			    "l1-low-watermark: %.3g is below %.2g: each eviction would empty most of L1",
			    cfg->l1_low_watermark, KVTD_WATERMARK_FLOOR);
	case KVTD_RULE_LEASE_ORDER:
		return kvt_fail(err, errlen, -EINVAL,
			    "lease-default-ms: %" PRIu64 " must not be longer than lease-max-ms %" PRIu64,
			    cfg->lease_default_ms, cfg->lease_max_ms);
	case KVTD_RULES_HOLD:
		break;
	}
	if (cfg->l2_size && !cfg->l2_path)
		return kvt_fail(err, errlen, -EINVAL, "l2-size: given without l2-path");
	if (cfg->l2_region_size % 4096)
		return kvt_fail(err, errlen, -EINVAL, "l2-region-size: must be a multiple of 4 KiB");
	if (cfg->l2_region_size && !cfg->l2_path)
		return kvt_fail(err, errlen, -EINVAL, "l2-region-size: given without l2-path");
	if (cfg->l3_key_file && !cfg->l3_path)
		return kvt_fail(err, errlen, -EINVAL, "l3-key-file: given without l3-path");
	if (cfg->l3_size && !cfg->l3_path)
		return kvt_fail(err, errlen, -EINVAL, "l3-size: given without l3-path");
	if (cfg->namespace_l3_quota && !cfg->l3_path)
		return kvt_fail(err, errlen, -EINVAL, "namespace-l3-quota: given without l3-path");
	if (strlen(cfg->socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return kvt_fail(err, errlen, -EINVAL, "socket: path '%s' is longer than %zu bytes",
			    cfg->socket_path, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	return 0;
}

static void build_long_options(struct option *lo)
{
	size_t n = 0;
	for (size_t i = 0; i < NOPTIONS; i++)
		lo[n++] = (struct option){options[i].name,
					  options[i].type == OPT_BOOL ? optional_argument
								      : required_argument,
					  NULL, (int)i};
	lo[n++] = (struct option){"help", no_argument, NULL, OPT_HELP_ID};
	lo[n++] = (struct option){"version", no_argument, NULL, OPT_VERSION_ID};
	lo[n] = (struct option){0};
}

static void build_short_options(char *buf)
{
	size_t n = 0;
	buf[n++] = ':'; /* report a missing argument as ':' */
	for (size_t i = 0; i < NOPTIONS; i++) {
		if (!options[i].short_name)
			continue;
		buf[n++] = (char)options[i].short_name;
		if (options[i].type != OPT_BOOL)
			buf[n++] = ':';
	}
	strcpy(buf + n, "hV");
}

static const struct option_def *option_by_short(int c)
{
	for (size_t i = 0; i < NOPTIONS; i++)
		if (options[i].short_name == c)
			return &options[i];
	return NULL;
}

struct pending_flag {
	const struct option_def *opt;
	const char *arg;
};

/* Collects the flags in order; the config file is read before they apply. */
static int scan_flags(int argc, char **argv, struct pending_flag *flags, size_t *nflags,
		      enum kvtd_action *action, char *err, size_t errlen)
{
	struct option lo[NOPTIONS + 3];
	char so[2 * NOPTIONS + 8];
	build_long_options(lo);
	build_short_options(so);
	optind = 1;
	opterr = 0;
	*action = KVTD_RUN;
	int c, idx;
	while ((c = getopt_long(argc, argv, so, lo, &idx)) != -1) {
		const struct option_def *o = NULL;
		if (c == OPT_HELP_ID || c == 'h')
			*action = KVTD_HELP;
		else if (c == OPT_VERSION_ID || c == 'V')
			*action = KVTD_VERSION;
		else if (c == '?' || c == ':') {
			const char *bad = argv[optind - 1];
			return kvt_fail(err, errlen, -EINVAL, "%s: %s (see --help)", bad,
				    c == ':' ? "missing argument" : "unknown option");
		} else if (c >= 0 && c < (int)NOPTIONS)
			o = &options[c];
		else
			o = option_by_short(c);
		if (o)
			flags[(*nflags)++] = (struct pending_flag){o, optarg ? optarg : "true"};
	}
	if (optind < argc)
		return kvt_fail(err, errlen, -EINVAL, "%s: unexpected argument (see --help)", argv[optind]);
	return 0;
}

int kvtd_config_load(struct kvtd_config *cfg, int argc, char **argv,
		     enum kvtd_action *action, char *err, size_t errlen)
{
	struct pending_flag *flags = calloc((size_t)argc + 1, sizeof(*flags));
	size_t nflags = 0;
	int rc = -EINVAL;
	if (!flags)
		return kvt_fail(err, errlen, -EINVAL, "out of memory");
	if (set_defaults(cfg, err, errlen))
		goto out;
	if (scan_flags(argc, argv, flags, &nflags, action, err, errlen))
		goto out;
	if (*action != KVTD_RUN) {
		rc = 0;
		goto out;
	}
	for (size_t i = 0; i < nflags; i++)
		if (flags[i].opt->offset == OFF(config_file) &&
		    set_from_text(cfg, flags[i].opt, flags[i].arg, "--config", err, errlen))
			goto out;
	if (cfg->config_file && load_file(cfg, cfg->config_file, err, errlen))
		goto out;
	for (size_t i = 0; i < nflags; i++) {
		char where[128];
		snprintf(where, sizeof(where), "--%s", flags[i].opt->name);
		if (set_from_text(cfg, flags[i].opt, flags[i].arg, where, err, errlen))
			goto out;
	}
	if (resolve_computed(cfg, err, errlen) || validate(cfg, err, errlen))
		goto out;
	rc = 0;
out:
	free(flags);
	if (rc)
		kvtd_config_free(cfg);
	return rc;
}

void kvtd_config_free(struct kvtd_config *cfg)
{
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option_def *o = &options[i];
		if (o->type == OPT_STRING || o->type == OPT_PATH || o->type == OPT_LISTEN) {
			free(*(char **)field(cfg, o));
			*(char **)field(cfg, o) = NULL;
		}
	}
}

void kvtd_config_print_help(const char *prog, FILE *out)
{
	fprintf(out,
		"Usage: %s [OPTION]...\n"
		"kvtierd: the kvtier daemon, a tiered KV-cache store for LLM inference\n"
		"servers: DRAM (L1), NVMe (L2) and a shared file system (L3).\n\n",
		prog);
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option_def *o = &options[i];
		char left[64];
		const char *arg = o->type == OPT_BOOL ? "[=BOOL]" : o->metavar ? " " : "";
		snprintf(left, sizeof(left), "%c%c%c --%s%s%s", o->short_name ? '-' : ' ',
			 o->short_name ? o->short_name : ' ', o->short_name ? ',' : ' ', o->name,
			 arg, o->metavar ? o->metavar : "");
		fprintf(out, "  %-32s %s\n", left, o->help);
		const char *def = o->def_help ? o->def_help : o->def;
		fprintf(out, "  %-32s   (default: %s%s)\n", "", def ? def : "none",
			o->live ? "; SIGHUP reloads it" : "");
	}
	fprintf(out, "  %-32s %s\n", "-h, --help", "show this help and exit");
	fprintf(out, "  %-32s %s\n", "-V, --version", "show the version and exit");
	fprintf(out,
		"\nSIZE is bytes, or a whole number with KiB, MiB, GiB, TiB (binary) or\n"
		"KB, MB, GB, TB (decimal). BOOL is true or false; a switch alone means\n"
		"true. Signals: SIGTERM and SIGINT stop the daemon;\n"
		"SIGHUP rereads the config file and applies the options marked above.\n"
		"See kvtierd(8).\n");
}

static bool option_equal(const struct kvtd_config *a, const struct kvtd_config *b,
			 const struct option_def *o)
{
	const void *fa = cfield(a, o), *fb = cfield(b, o);
	switch (o->type) {
	case OPT_STRING:
	case OPT_PATH:
	case OPT_LISTEN: {
		const char *sa = *(char *const *)fa, *sb = *(char *const *)fb;
		return (!sa && !sb) || (sa && sb && strcmp(sa, sb) == 0);
	}
	case OPT_SIZE:
	case OPT_UINT: return *(const uint64_t *)fa == *(const uint64_t *)fb;
	case OPT_FRACTION: return *(const double *)fa == *(const double *)fb;
	case OPT_BOOL: return *(const bool *)fa == *(const bool *)fb;
	case OPT_LOGLEVEL:
		return *(const enum kvt_log_level *)fa == *(const enum kvt_log_level *)fb;
	}
	return false;
}

void kvtd_config_diff(const struct kvtd_config *a, const struct kvtd_config *b,
		      void (*fn)(const char *name, bool live, void *ctx), void *ctx)
{
	for (size_t i = 0; i < NOPTIONS; i++)
		if (!option_equal(a, b, &options[i]))
			fn(options[i].name, options[i].live, ctx);
}

/* The bytes of an option's value that are not a string (strings are never live). */
static size_t scalar_size(enum opt_type type)
{
	switch (type) {
	case OPT_SIZE:
	case OPT_UINT: return sizeof(uint64_t);
	case OPT_FRACTION: return sizeof(double);
	case OPT_BOOL: return sizeof(bool);
	case OPT_LOGLEVEL: return sizeof(enum kvt_log_level);
	case OPT_STRING:
	case OPT_PATH:
	case OPT_LISTEN: break;
	}
	return 0;
}

void kvtd_config_take_live(struct kvtd_config *cfg, const struct kvtd_config *next)
{
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option_def *o = &options[i];
		if (o->live)
			memcpy(field(cfg, o), cfield(next, o), scalar_size(o->type));
	}
}

/*
 * main.c — kvtierd: reads the settings, opens the tiers, and runs the event
 * loop that owns the L1 engine: signals (stop, reload) and lease expiry.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "copy.h"
#include "dataplane.h"
#include "gpu.h"
#include "http.h"
#include "loop.h"
#include "loopcall.h"
#include "kvtier/kvtier.h"
#include "l1.h"
#include "l2svc.h"
#include "l3svc.h"
#include "log.h"
#include "policy.h"
#include "settings.h"
#include "webui.h"

/* How often expired leases are swept; leases are ms-granular, this bounds the lag. */
#define LEASE_SWEEP_MS 50
/* Copies are cut into chunks of this size so one big block spreads over threads. */
#define COPY_CHUNK_BYTES (2u << 20)
/* CUDA streams per device: batches of different lanes spread over them. */
#define CUDA_STREAMS_PER_DEVICE 8
/* Leases one client may hold at once. */
#define MAX_LEASES_PER_CLIENT 4096

struct kvtd {
	struct kvtd_config cfg;
	int argc;
	char **argv;
	struct l1 l1;
	struct tiers tiers;          /* L1 and the lower tiers, in settings order */
	struct l2svc l2;
	struct l3svc l3;
	struct ns_registry namespaces;
	struct copy_engine copy, gpu_copy;
	bool copy_open, gpu_copy_open, tiers_open, dp_open;
	bool l1_pinned;
	struct dp dp;
	struct http_ctx http_ctx;
	struct policy policy;        /* SIGHUP and PUT /v1/policy apply through it */
	struct http_server *http;
	struct loopcall calls;
	bool calls_open;
	char *admin_token;
	struct loop loop;
	struct loop_source sig_src;
	struct loop_timer lease_timer;
};

static double elapsed_ms(const struct timespec *start)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - start->tv_sec) * 1e3 +
	       (double)(t.tv_nsec - start->tv_nsec) / 1e6;
}

/* mkdir -p with mode 0750 for what it creates. */
static int make_dirs(const char *path)
{
	char buf[4096];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0750) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0750) && errno != EEXIST)
		return -errno;
	return 0;
}

static int prepare_runtime_dir(const struct kvtd_config *cfg)
{
	int err = make_dirs(cfg->runtime_dir);
	if (err) {
		log_error("runtime-dir %s: cannot create: %s", cfg->runtime_dir, kvt_strerror(err));
		return err;
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", cfg->socket_path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	if (access(dir, W_OK | X_OK)) {
		err = -errno;
		log_error("socket %s: directory %s is not writable: %s", cfg->socket_path, dir,
			  kvt_strerror(err));
		return err;
	}
	return 0;
}

static int open_l1(struct kvtd *d)
{
	struct l1_config lc = {
		.size = d->cfg.l1_size,
		.region_size = d->cfg.l1_region_size,
		.hugepages = d->cfg.l1_hugepages,
		.high_watermark = d->cfg.l1_high_watermark,
		.low_watermark = d->cfg.l1_low_watermark,
		.max_leases = (uint32_t)d->cfg.max_leases,
		.max_lease_ms = (uint32_t)d->cfg.lease_max_ms,
	};
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	int err = l1_init(&d->l1, &lc);
	char size[64], region[64];
	kvt_format_size(d->cfg.l1_size, size, sizeof(size));
	kvt_format_size(d->cfg.l1_region_size, region, sizeof(region));
	if (err) {
		log_error("l1: cannot map %s: %s", size, kvt_strerror(err));
		return err;
	}
	log_info("l1: %s in %u regions of %s, hugetlb %s, mapped in %.1f ms", size,
		 d->l1.arena.nregions, region, d->l1.arena.hugepages ? "yes" : "no",
		 elapsed_ms(&start));
	return 0;
}

/* A warning when the memlock limit is below what pinning L1 takes. */
static void check_memlock(uint64_t bytes)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= bytes)
		return;
	char have[64], need[64];
	kvt_format_size(rl.rlim_cur, have, sizeof(have));
	kvt_format_size(bytes, need, sizeof(need));
	log_warn("l1: the memlock limit is %s, pinning L1 needs %s; if pinning fails, raise it "
		 "(ulimit -l, LimitMEMLOCK= in systemd, the container's memlock ulimit)",
		 have, need);
}

/* Pins the L1 arena for DMA so GPU copies run at PCIe speed (docs/gpu.md: 1/8 when pageable). */
static int pin_l1(struct kvtd *d)
{
	struct arena *a = &d->l1.arena;
	check_memlock(a->size);
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	char why[256], size[64];
	kvt_format_size(a->size, size, sizeof(size));
	int err = gpu_pin_host(a->base, a->size, why, sizeof(why));
	if (err) {
		log_error("l1: cannot pin %s for DMA: %s; raise the memlock limit or free memory, "
			  "or run with --l1-pin=false (GPU copies then run at pageable speed)",
			  size, why);
		return err;
	}
	double ms = elapsed_ms(&start);
	d->l1_pinned = true;
	atomic_store(&gpu_stats.l1_pinned_bytes, a->size);
	atomic_store(&gpu_stats.l1_pin_us, (uint64_t)(ms * 1000.0));
	log_info("l1: %s pinned for DMA in %.1f ms", size, ms);
	return 0;
}

/* Finds the GPUs; with any, pins L1 (unless told not to). */
static int open_gpu(struct kvtd *d)
{
	char why[256];
	int n = gpu_init(why, sizeof(why));
	if (n <= 0) {
		log_info("cuda: unavailable: %s; GPU staging buffers are refused, host paths run",
			 why);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		char uuid[41];
		gpu_device_uuid(i, uuid);
		log_info("cuda: device %d %s", i, uuid);
	}
	if (!d->cfg.l1_pin) {
		log_warn("l1: not pinned (l1-pin=false): GPU copies run at pageable speed");
		return 0;
	}
	return pin_l1(d);
}

static void on_signal(struct loop_source *src, uint32_t events);
static void sweep_leases(struct loop_timer *t);

/*
 * The signals the loop takes through a signalfd. Blocked first thing in
 * main: every thread inherits the mask at creation, and a thread that
 * left them open (CUDA starts its own) would take SIGTERM's default action.
 */
static void loop_signals(sigset_t *mask)
{
	sigemptyset(mask);
	sigaddset(mask, SIGTERM);
	sigaddset(mask, SIGINT);
	sigaddset(mask, SIGHUP);
	if (getenv("KVTIERD_TEST_STALL_MS"))
		sigaddset(mask, SIGUSR2);
}

/*
 * A test hook: with KVTIERD_TEST_STALL_MS set, SIGUSR2 holds the loop that
 * long, as a slow step would (tests/python/test_hostile_control.py checks
 * that the probes answer meanwhile and loop calls end at their deadline).
 */
static void stall_loop_for_test(void)
{
	unsigned long ms = strtoul(getenv("KVTIERD_TEST_STALL_MS"), NULL, 10);
	log_warn("SIGUSR2: holding the event loop for %lu ms (KVTIERD_TEST_STALL_MS, a test hook)", ms);
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * Raises the soft fd limit to the hard one: the default soft limit (1024) is
 * below what max-connections, the control plane's connections and the
 * tiers' files may need. Says so when the hard limit is still too low.
 */
static void raise_fd_limit(const struct kvtd_config *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	uint64_t want = cfg->max_connections + 1024 + 256; /* control plane, tiers, CUDA */
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		log_warn("file descriptors: the limit is %llu, below the %llu that max-connections %llu "
			 "may need; connections past it are closed at once (raise LimitNOFILE or ulimit -n)",
			 (unsigned long long)rl.rlim_cur, (unsigned long long)want,
			 (unsigned long long)cfg->max_connections);
}

static void block_loop_signals(void)
{
	sigset_t mask;
	loop_signals(&mask);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static int open_loop(struct kvtd *d)
{
	sigset_t mask;
	loop_signals(&mask);
	d->sig_src = (struct loop_source){signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK),
					  on_signal};
	int err = loop_init(&d->loop);
	if (err)
		return err;
	if (d->sig_src.fd < 0)
		return -errno;
	err = loop_add(&d->loop, &d->sig_src, EPOLLIN);
	return err ? err : loop_add_timer(&d->loop, &d->lease_timer, LEASE_SWEEP_MS, sweep_leases);
}

/*
 * Reads the admin token (one line; surrounding white space dropped), and
 * refuses a control plane reachable beyond loopback without one.
 */
static int load_admin_token(struct kvtd *d, char *err, size_t errlen)
{
	const char *path = d->cfg.admin_token_file;
	if (!path) {
		if (http_listen_is_loopback(d->cfg.http_listen))
			return 0;
		snprintf(err, errlen,
			 "http: %s is reachable beyond this host; give --admin-token-file so "
			 "that the mutating endpoints are not open to the network",
			 d->cfg.http_listen);
		return -EINVAL;
	}
	FILE *f = fopen(path, "r");
	char buf[1024] = "";
	if (!f || !fgets(buf, sizeof(buf), f)) {
		snprintf(err, errlen, "admin-token-file %s: %s", path,
			 f ? "empty" : kvt_strerror(-errno));
		if (f)
			fclose(f);
		return -EINVAL;
	}
	fclose(f);
	char *start = buf, *end = buf + strlen(buf);
	while (*start == ' ' || *start == '\t')
		start++;
	while (end > start && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' ||
			       end[-1] == '\t'))
		*--end = '\0';
	if (end - start < 16) {
		snprintf(err, errlen, "admin-token-file %s: the token must be at least 16 characters",
			 path);
		return -EINVAL;
	}
	d->admin_token = strdup(start);
	return d->admin_token ? 0 : -ENOMEM;
}

static int open_dataplane(struct kvtd *d)
{
	int err = copy_engine_host_init(&d->copy, (unsigned)d->cfg.copy_threads, COPY_CHUNK_BYTES);
	if (err) {
		log_error("copy engine: %s", kvt_strerror(err));
		return err;
	}
	d->copy_open = true;
	if (gpu_device_count() > 0) {
		err = copy_engine_cuda_init(&d->gpu_copy, (unsigned)gpu_device_count(),
					    CUDA_STREAMS_PER_DEVICE);
		if (err) {
			log_error("cuda copy engine: %s", kvt_strerror(err));
			return err;
		}
		d->gpu_copy_open = true;
	}
	struct dp_config dc = {
		.socket_path = d->cfg.socket_path,
		.max_connections = (uint32_t)d->cfg.max_connections,
		.max_leases_per_client = MAX_LEASES_PER_CLIENT,
		.lease_default_ms = (uint32_t)d->cfg.lease_default_ms,
		.store_wait_ms = (uint32_t)d->cfg.store_wait_ms,
		.max_namespaces_per_client = (uint32_t)d->cfg.max_namespaces_per_client,
		.peer = {.connections = (uint32_t)d->cfg.max_connections_per_uid,
			 .namespaces = (uint32_t)d->cfg.max_namespaces_per_uid,
			 .leased_bytes = d->cfg.max_leased_bytes_per_uid,
			 .hello_timeout_ms = (uint32_t)d->cfg.hello_timeout_ms},
		.buffers = {.per_uid = (uint32_t)d->cfg.max_buffers_per_uid,
			    .max_size = d->cfg.max_buffer_size,
			    .bytes_per_uid = d->cfg.max_buffer_bytes_per_uid},
		.namespace_l1_quota = d->cfg.namespace_l1_quota,
		.namespace_l2_quota = d->cfg.namespace_l2_quota,
	};
	char why[512];
	tiers_init(&d->tiers, &d->l1, &d->loop);
	d->tiers_open = true;
	err = dp_open(&d->dp, &dc, &d->loop, &d->l1, &d->tiers, &d->namespaces, &d->copy,
		     d->gpu_copy_open ? &d->gpu_copy : NULL, why, sizeof(why));
	if (err) {
		log_error("data plane: %s", why);
		return err;
	}
	d->dp_open = true;
	log_info("data plane: %s, %u %s copy threads", d->cfg.socket_path,
		 d->copy.nthreads, d->copy.ops->name);
	return 0;
}

static void report_change(const char *name, bool live, void *ctx)
{
	(void)ctx;
	if (live)
		log_info("reload: %s changed, applied", name);
	else
		log_warn("reload: %s changed, takes effect at the next restart", name);
}

/* SIGHUP: reread the file (flags still win) and apply what can change live. */
static void reload(struct kvtd *d)
{
	struct kvtd_config next;
	enum kvtd_action action;
	char err[1024];
	if (kvtd_config_load(&next, d->argc, d->argv, &action, err, sizeof(err))) {
		log_error("reload: %s; keeping the running settings", err);
		return;
	}
	struct policy_values cur, want;
	policy_read(&d->policy, &cur);
	policy_from_config(&next, &cur, &want);
	int rc = policy_apply(&d->policy, &want);
	if (rc) {
		log_error("reload: %s; keeping the running settings", kvt_strerror(rc));
	} else {
		kvtd_config_diff(&d->cfg, &next, report_change, NULL);
		kvtd_config_take_live(&d->cfg, &next);
	}
	kvtd_config_free(&next);
}

static struct kvtd *daemon_of(struct loop_source *src, size_t offset)
{
	return (struct kvtd *)((char *)src - offset);
}

static void sweep_leases(struct loop_timer *t)
{
	struct kvtd *d = (struct kvtd *)((char *)t - offsetof(struct kvtd, lease_timer));
	l1_lease_expire(&d->l1, kvt_now_ms());
}

static void on_signal(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct kvtd *d = daemon_of(src, offsetof(struct kvtd, sig_src));
	struct signalfd_siginfo si;
	while (read(src->fd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			log_info("SIGHUP: reloading settings");
			reload(d);
		} else if (si.ssi_signo == SIGUSR2) {
			stall_loop_for_test();
		} else {
			log_info("%s: stopping", strsignal((int)si.ssi_signo));
			loop_stop(&d->loop);
		}
	}
}

static void close_all(struct kvtd *d)
{
	if (d->calls_open)
		loopcall_shutdown(&d->calls); /* no control-plane call waits on the loop */
	http_stop(d->http);
	if (d->calls_open)
		loopcall_close(&d->calls);
	free(d->admin_token);
	if (d->dp_open)
		dp_close(&d->dp);
	if (d->tiers_open)
		tiers_close(&d->tiers, (uint32_t)d->cfg.stop_flush_ms);
	if (d->copy_open)
		copy_engine_destroy(&d->copy);
	if (d->gpu_copy_open)
		copy_engine_destroy(&d->gpu_copy);
	if (d->l1_pinned)
		gpu_unpin_host(d->l1.arena.base);
	if (d->l1.arena.base)
		l1_destroy(&d->l1);
	ns_registry_destroy(&d->namespaces);
	loop_destroy(&d->loop);
	if (d->sig_src.fd >= 0)
		close(d->sig_src.fd);
	loop_del_timer(&d->loop, &d->lease_timer);
	kvtd_config_free(&d->cfg);
}

/* Readiness: the tiers are open and L2's index is rebuilt. Tests wait for this line. */
static void announce_ready(void *ctx)
{
	struct kvtd *d = ctx;
	atomic_store(&d->http_ctx.ready, true);
	char host[256];
	uint16_t port;
	kvtd_parse_listen(d->cfg.http_listen, host, sizeof(host), &port);
	bool v6 = strchr(host, ':') != NULL;
	log_info("ready: control plane on http://%s%s%s:%u/, data plane on %s", v6 ? "[" : "",
		 host, v6 ? "]" : "", (unsigned)http_port(d->http), d->cfg.socket_path);
}

int main(int argc, char **argv)
{
	struct kvtd d = {.argc = argc, .argv = argv, .loop.epfd = -1, .sig_src.fd = -1,
			 .lease_timer.src.fd = -1};
	ns_registry_init(&d.namespaces);
	enum kvtd_action action;
	char err[1024];
	if (kvtd_config_load(&d.cfg, argc, argv, &action, err, sizeof(err))) {
		fprintf(stderr, "kvtierd: %s\n", err);
		return 2;
	}
	if (action != KVTD_RUN) {
		if (action == KVTD_HELP)
			kvtd_config_print_help("kvtierd", stdout);
		else
			printf("kvtierd (kvtier) %s, CUDA %s\n", kvt_version(),
			       gpu_built_in() ? "built in" : "not built in");
		kvtd_config_free(&d.cfg);
		return 0;
	}
	if (load_admin_token(&d, err, sizeof(err))) {
		fprintf(stderr, "kvtierd: %s\n", err);
		kvtd_config_free(&d.cfg);
		return 2;
	}
	kvt_log_set_level(d.cfg.log_level);
	log_info("kvtierd %s starting (pid %d)", kvt_version(), (int)getpid());
	block_loop_signals();
	raise_fd_limit(&d.cfg);

	int rc = 1;
	if (prepare_runtime_dir(&d.cfg) || open_l1(&d) || open_gpu(&d))
		goto out;
	int err_loop = open_loop(&d);
	if (err_loop) {
		log_error("event loop: %s", kvt_strerror(err_loop));
		goto out;
	}
	if (open_dataplane(&d))
		goto out;
	int err_calls = loopcall_open(&d.calls, &d.loop);
	if (err_calls) {
		log_error("control plane: cannot reach the event loop: %s", kvt_strerror(err_calls));
		goto out;
	}
	d.calls_open = true;
	char why[256];
	/* The stack's order is this order: L2, then L3. */
	if (d.cfg.l2_path &&
	    l2svc_open(&d.l2, &d.cfg, &d.l1, &d.tiers, &d.loop, announce_ready, &d))
		goto out;
	if (d.cfg.l3_path && l3svc_open(&d.l3, &d.cfg, &d.l1, &d.tiers, &d.namespaces, &d.loop))
		goto out;
	d.http_ctx.l1 = &d.l1;
	d.http_ctx.tiers = &d.tiers;
	d.http_ctx.dp = &d.dp;
	d.http_ctx.namespaces = &d.namespaces;
	d.http_ctx.calls = &d.calls;
	d.calls.timeouts = &d.http_ctx.http_stats.loop_busy;
	d.http_ctx.hosts = d.cfg.http_hosts;
	d.policy = (struct policy){&d.l1, &d.dp, &d.tiers};
	d.http_ctx.policy = &d.policy;
	d.http_ctx.admin_token = d.admin_token;
	d.http_ctx.web_dir = webui_find_dir(d.cfg.web_dir);
	if (d.http_ctx.web_dir)
		log_info("dashboard: serving %s at /", d.http_ctx.web_dir);
	else
		log_warn("dashboard: no index.html in %s; / answers 404",
			 d.cfg.web_dir ? d.cfg.web_dir : KVT_WEBDIR " or the source tree's web/");
	if (!(d.http = http_start(d.cfg.http_listen, &d.http_ctx, why, sizeof(why)))) {
		log_error("http %s: %s", d.cfg.http_listen, why);
		goto out;
	}
	if (!d.cfg.l2_path) /* else once L2's index is rebuilt */
		announce_ready(&d);
	rc = loop_run(&d.loop) ? 1 : 0;
out:
	close_all(&d);
	if (rc == 0)
		log_info("stopped");
	return rc;
}

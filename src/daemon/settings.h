/*
 * settings.h — kvtierd's configuration: one declarative table of options drives
 * the command-line flags, the JSON config file keys (the long option names),
 * defaults, validation and the --help text.
 *
 * Precedence: built-in defaults, then the config file, then flags.
 */
#ifndef KVTD_SETTINGS_H
#define KVTD_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

struct kvtd_config {
	char *config_file;
	char *runtime_dir;
	char *socket_path;
	char *http_listen;
	char *admin_token_file;
	uint64_t l1_size;
	uint64_t l1_region_size;
	bool l1_hugepages;
	bool l1_pin;
	double l1_high_watermark;
	double l1_low_watermark;
	uint64_t max_connections;
	uint64_t copy_threads;
	uint64_t max_leases;
	uint64_t lease_max_ms;
	uint64_t lease_default_ms;
	uint64_t store_wait_ms;
	uint64_t stop_flush_ms;
	uint64_t max_namespaces_per_client;
	uint64_t max_connections_per_uid;
	uint64_t max_namespaces_per_uid;
	uint64_t max_buffers_per_uid;
	uint64_t max_buffer_size;
	uint64_t max_buffer_bytes_per_uid;
	uint64_t max_leased_bytes_per_uid;
	uint64_t hello_timeout_ms;
	uint64_t namespace_l1_quota;
	uint64_t namespace_l2_quota;
	char *l2_path;
	uint64_t l2_size;
	uint64_t l2_region_size;
	uint64_t l2_queue_depth;
	uint64_t l2_write_buffers;
	char *l3_path;
	char *l3_key_file;
	uint64_t l3_size;
	uint64_t namespace_l3_quota;
	uint64_t l3_queue_depth;
	uint64_t l3_op_timeout_ms;
	uint64_t l3_scan_ms;
	char *web_dir;
	char *http_hosts;
	enum kvt_log_level log_level;
};

enum kvtd_action {
	KVTD_RUN,
	KVTD_HELP,
	KVTD_VERSION,
};

/*
 * Fills cfg from defaults, the --config file and argv, then validates it and
 * resolves the computed defaults. Returns 0 with *action set, or -EINVAL
 * with one message in err ("--l1-size: ..." or "config file X: key ...").
 */
int kvtd_config_load(struct kvtd_config *cfg, int argc, char **argv,
		     enum kvtd_action *action, char *err, size_t errlen);
void kvtd_config_free(struct kvtd_config *cfg);

/* The --help text, generated from the option table. */
void kvtd_config_print_help(const char *prog, FILE *out);

/*
 * The live options (the table marks them; policy.h applies them, for
 * SIGHUP and PUT /v1/policy alike): their values from next into cfg, once
 * applied.
 */
void kvtd_config_take_live(struct kvtd_config *cfg, const struct kvtd_config *next);

/* Calls fn for each option that differs between a and b. */
void kvtd_config_diff(const struct kvtd_config *a, const struct kvtd_config *b,
		      void (*fn)(const char *name, bool live, void *ctx), void *ctx);

/*
 * The cross-field rules, in one place for every path that sets these (the
 * file, flags, SIGHUP and PUT /v1/policy); each caller names the fields its
 * own way in the message.
 */
enum kvtd_rule {
	KVTD_RULES_HOLD,
	KVTD_RULE_WATERMARK_ORDER,   /* low watermark < high watermark */
	KVTD_RULE_WATERMARK_FLOOR,   /* low watermark >= KVTD_WATERMARK_FLOOR */
	KVTD_RULE_LEASE_ORDER,       /* lease default <= lease max */
};
/*
 * The lowest low watermark: below it each eviction would empty most of L1
 * (a near-zero one, all of it, at the first byte past the high one).
 */
#define KVTD_WATERMARK_FLOOR 0.5

enum kvtd_rule kvtd_check_rules(double high, double low, uint64_t lease_default_ms,
				uint64_t lease_max_ms);

/* "ADDR:PORT" or "[IPv6]:PORT" into host (without brackets) and port. */
int kvtd_parse_listen(const char *text, char *host, size_t hostlen, uint16_t *port);

/*
 * The memory this process may use: physical memory, or a lower limit of its
 * cgroup or any cgroup above it (v2 memory.max, v1 memory.limit_in_bytes).
 */
uint64_t kvtd_memory_limit(void);
/* The same from a given /proc/self/cgroup file and cgroup mount (tests). */
uint64_t kvtd_memory_limit_in(const char *proc_cgroup, const char *cgroup_root, uint64_t physical);

#endif

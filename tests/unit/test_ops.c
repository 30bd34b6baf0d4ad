/*
 * test_ops.c — the op handlers (ops.h) in-process, without a daemon: a data
 * plane over a real L1 and host copy engine, one connection on a socketpair,
 * frames handed to ops_dispatch and the replies read from the connection's
 * output (synchronous ops) or, once the loop has run its copies, from the
 * socket (STORE, LOAD). Leak-checked by the unit tests' allocators.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "codec.h"
#include "conn.h"
#include "dataplane.h"
#include "mem_tier.h"
#include "ops.h"
#include "test_util.h"

#define BLOCK 4096u

struct fixture {
	struct loop loop;
	struct l1 l1;
	struct tiers stack;         /* L1 alone */
	struct ns_registry namespaces;
	struct copy_engine copy;
	struct dp dp;
	struct dp_conn *conn;
	int peer;                  /* the client's end of the socketpair */
	char socket_path[64];
	uint8_t reply[512];
	uint32_t reply_len;
	struct mem_tier m2;        /* a victim tier, used in evict mode only */
	unsigned clock;
};

static struct fixture *fixture_new(void)
{
	struct fixture *f = test_calloc(1, sizeof(*f));
	assert_int_equal(loop_init(&f->loop), 0);
	struct l1_config lc = {.size = 4u << 20, .region_size = 1u << 20, .high_watermark = 1,
			       .low_watermark = 0.9, .max_leases = 16, .max_lease_ms = 1000};
	assert_int_equal(l1_init(&f->l1, &lc), 0);
	ns_registry_init(&f->namespaces);
	assert_int_equal(copy_engine_host_init(&f->copy, 1, 64 << 10), 0);
	snprintf(f->socket_path, sizeof(f->socket_path), "/tmp/kvtier-ops-%d.sock", (int)getpid());
	struct dp_config dc = {.socket_path = f->socket_path, .max_connections = 4,
			       .max_leases_per_client = 2, .lease_default_ms = 100,
			       .max_namespaces_per_client = 2,
			       .peer = {.connections = 4, .namespaces = 4, .leased_bytes = 4u << 20,
					.hello_timeout_ms = 60000},
			       .buffers = {.per_uid = 16, .max_size = 4u << 20, .bytes_per_uid = 16u << 20}};
	char why[256];
	tiers_init(&f->stack, &f->l1, &f->loop);
	mem_tier_init(&f->m2, "m2", KVT_TIER_L2, true, &f->clock);
	assert_int_equal(tiers_add(&f->stack, &f->m2.tier), 0);
	assert_int_equal(dp_open(&f->dp, &dc, &f->loop, &f->l1, &f->stack, &f->namespaces, &f->copy, NULL,
				 why, sizeof(why)), 0);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(conn_open(&f->dp, sv[0]), 0);
	f->conn = LIST_FIRST(&f->dp.conns);
	f->peer = sv[1];
	return f;
}

static void fixture_free(struct fixture *f)
{
	close(f->peer);
	dp_close(&f->dp);
	tiers_close(&f->stack, 0);
	copy_engine_destroy(&f->copy);
	l1_destroy(&f->l1);
	ns_registry_destroy(&f->namespaces);
	loop_destroy(&f->loop);
	test_free(f);
}

/* The one reply a synchronous op left in the connection's output: its status. */
static int32_t take_reply(struct fixture *f, uint16_t op)
{
	struct dp_conn *c = f->conn;
	assert_true(c->out_len - c->out_off >= KVT_HDR_BYTES);
	struct wire_hdr h;
	wire_hdr_decode(c->out + c->out_off, &h);
	assert_int_equal(h.op, op);
	assert_int_equal(h.id, 7);
	assert_true(h.flags & KVT_FLAG_REPLY);
	assert_int_equal(c->out_len - c->out_off, KVT_HDR_BYTES + h.length);
	assert_true(h.length <= sizeof(f->reply));
	memcpy(f->reply, c->out + c->out_off + KVT_HDR_BYTES, h.length);
	f->reply_len = h.length;
	c->out_len = c->out_off = 0;
	return h.status;
}

/* Runs op with payload p through the op table; the reply's status. */
static int32_t call(struct fixture *f, uint16_t op, const uint8_t *p, uint32_t len)
{
	struct wire_hdr h = {.magic = KVT_PROTO_MAGIC, .op = op, .length = len, .id = 7};
	ops_dispatch(f->conn, &h, p);
	return take_reply(f, op);
}

static int32_t hello(struct fixture *f, uint8_t role, const char *model)
{
	struct frame_hello fh = {.version = KVT_PROTO_VERSION, .role = role, .tp_size = 1,
				 .block_bytes = BLOCK};
	snprintf(fh.model, sizeof(fh.model), "%s", model);
	uint8_t p[KVT_HELLO_BYTES + KVT_MAX_NAME];
	return call(f, KVT_OP_HELLO, p, (uint32_t)frame_encode_hello(p, &fh));
}

static uint64_t dp_stat(struct fixture *f, _Atomic uint64_t *field)
{
	(void)f;
	return atomic_load(field);
}

static void test_checks_before_the_handler(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	assert_int_equal(call(f, KVT_OP_PING, NULL, 0), -ENOTCONN);
	assert_int_equal(dp_stat(f, &f->dp.stats.rejected.no_hello), 1);
	assert_int_equal(call(f, 99, NULL, 0), -EOPNOTSUPP);
	assert_int_equal(dp_stat(f, &f->dp.stats.rejected.unknown_op), 1);
	assert_int_equal(hello(f, KVT_ROLE_SCHEDULER, "m"), 0);
	struct reply_hello hr;
	assert_int_equal(reply_decode_hello(f->reply, f->reply_len, &hr), 0);
	assert_int_equal(hr.max_blocks, KVT_MAX_BLOCKS);
	assert_true(hr.session & 1);
	assert_int_equal(hello(f, KVT_ROLE_SCHEDULER, "m"), -EALREADY);
	uint8_t p[KVT_REGISTER_BYTES];
	struct frame_register reg = {.kind = KVT_BUFFER_SHM, .size = BLOCK};
	size_t n = frame_encode_register(p, &reg);
	assert_int_equal(call(f, KVT_OP_REGISTER, p, (uint32_t)n), -EPERM); /* a scheduler */
	assert_int_equal(dp_stat(f, &f->dp.stats.rejected.role), 1);
	assert_int_equal(call(f, KVT_OP_PING, (const uint8_t *)"x", 1), -EBADMSG);
	assert_int_equal(call(f, KVT_OP_PING, NULL, 0), 0);
	fixture_free(f);
}

/* Waits for the transfer's reply on the socket: its block statuses into b. */
static void transfer_reply(struct fixture *f, uint16_t op, struct kvt_block *b, uint32_t n)
{
	while (f->conn->inflight)
		assert_int_equal(loop_run_once(&f->loop, 5000), 0);
	uint8_t buf[KVT_HDR_BYTES + 64];
	size_t want = KVT_HDR_BYTES + reply_transfer_bytes(n);
	assert_int_equal(recv(f->peer, buf, want, MSG_WAITALL), (ssize_t)want);
	struct wire_hdr h;
	wire_hdr_decode(buf, &h);
	assert_int_equal(h.op, op);
	assert_int_equal(h.status, 0);
	assert_int_equal(reply_decode_transfer(buf + KVT_HDR_BYTES, h.length, op == KVT_OP_LOAD, b,
					       n), 0);
}

static void transfer(struct fixture *f, uint16_t op, uint32_t buffer, struct kvt_block *b,
		     uint32_t n)
{
	uint8_t p[8 + 4 * KVT_BLOCK_ENTRY_BYTES];
	size_t len = frame_encode_blocks(p, buffer, b, n);
	struct wire_hdr h = {.magic = KVT_PROTO_MAGIC, .op = op, .length = (uint32_t)len, .id = 7};
	ops_dispatch(f->conn, &h, p);
	transfer_reply(f, op, b, n);
}

static void test_store_then_load_byte_exact(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	assert_int_equal(hello(f, KVT_ROLE_WORKER, "m"), 0);
	int memfd = memfd_create("ops", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(memfd, 2 * BLOCK), 0);
	uint8_t *staging = mmap(NULL, 2 * BLOCK, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	assert_true(staging != MAP_FAILED);
	f->conn->fds[f->conn->nfds++] = memfd; /* as if it came with the frame */
	uint8_t p[KVT_REGISTER_BYTES];
	struct frame_register reg = {.kind = KVT_BUFFER_SHM, .size = 2 * BLOCK};
	assert_int_equal(call(f, KVT_OP_REGISTER, p, (uint32_t)frame_encode_register(p, &reg)), 0);
	uint32_t index;
	assert_int_equal(reply_decode_register(f->reply, f->reply_len, &index), 0);

	test_fill(staging, BLOCK, 11);
	struct kvt_block b[2] = {{.key = test_key(1), .offset = 0, .length = BLOCK},
				 {.key = test_key(2), .offset = 2 * BLOCK, .length = BLOCK}};
	transfer(f, KVT_OP_STORE, index, b, 2);
	assert_int_equal(b[0].status, 0);
	assert_int_equal(b[1].status, -ERANGE); /* past the buffer's end */
	assert_int_equal(dp_stat(f, &f->dp.stats.blocks_stored), 1);
	assert_int_equal(dp_stat(f, &f->dp.stats.rejected.out_of_range), 1);

	memset(staging, 0, 2 * BLOCK);
	b[1] = (struct kvt_block){.key = test_key(3), .offset = BLOCK, .length = BLOCK};
	transfer(f, KVT_OP_LOAD, index, b, 2);
	assert_int_equal(b[0].status, 0);
	assert_int_equal(b[0].length, BLOCK);
	assert_true(test_check(staging, BLOCK, 11));
	assert_int_equal(b[1].status, -ENOENT);
	assert_int_equal(dp_stat(f, &f->dp.stats.blocks_loaded), 1);
	assert_int_equal(dp_stat(f, &f->dp.stats.blocks_load_missing), 1);

	/* LOOKUP with the default lease, then RELEASE of it; a second RELEASE is unknown. */
	struct kvt_key keys[2] = {test_key(1), test_key(3)};
	uint8_t tiers[2];
	struct kvt_lookup lk = {.keys = keys, .nkeys = 2, .tiers = tiers,
				.lease_ms = KVT_LEASE_DEFAULT};
	uint8_t lp[8 + 2 * KVT_KEY_BYTES];
	assert_int_equal(call(f, KVT_OP_LOOKUP, lp, (uint32_t)frame_encode_lookup(lp, &lk)), 0);
	assert_int_equal(reply_decode_lookup(f->reply, f->reply_len, &lk), 0);
	assert_int_equal(lk.hits, 1);
	assert_int_equal(tiers[0], KVT_TIER_L1);
	assert_true(lk.lease_id != 0);
	uint8_t rp[8];
	assert_int_equal(call(f, KVT_OP_RELEASE, rp, (uint32_t)frame_encode_u64(rp, lk.lease_id)),
			 0);
	assert_int_equal(call(f, KVT_OP_RELEASE, rp, (uint32_t)frame_encode_u64(rp, lk.lease_id)),
			 -ENOENT);
	assert_int_equal(call(f, KVT_OP_UNREGISTER, rp, (uint32_t)frame_encode_u32(rp, index)), 0);
	assert_int_equal(call(f, KVT_OP_UNREGISTER, rp, (uint32_t)frame_encode_u32(rp, index)),
			 -ENOENT);
	munmap(staging, 2 * BLOCK);
	close(memfd);
	fixture_free(f);
}

/* Fills L1 with dirty blocks of the connection's namespace (ids from first); how many. */
static unsigned fill_l1_dirty(struct fixture *f, uint64_t first)
{
	unsigned n = 0;
	for (;; n++) {
		struct l1_ref ref;
		struct kvt_key key = test_key(first + n);
		if (l1_store_begin(&f->l1, f->conn->ns, &key, 0, BLOCK, L1_STORE_WAIT_DIRTY, &ref))
			return n;
		test_fill(ref.data, BLOCK, first + n);
		assert_true(l1_store_commit(&f->l1, &ref));
	}
}

static uint32_t lookup_hits(struct fixture *f, uint64_t id)
{
	struct kvt_key key = test_key(id);
	uint8_t tiers[1];
	struct kvt_lookup lk = {.keys = &key, .nkeys = 1, .tiers = tiers};
	uint8_t lp[8 + KVT_KEY_BYTES];
	assert_int_equal(call(f, KVT_OP_LOOKUP, lp, (uint32_t)frame_encode_lookup(lp, &lk)), 0);
	assert_int_equal(reply_decode_lookup(f->reply, f->reply_len, &lk), 0);
	return lk.hits;
}

/*
 * Issue 36, item 18: with the victim tier taking no writes (failed, full),
 * every block L1 holds is dirty, L1's alone. A LOAD from that tier used to
 * promote into L1, evicting (and so dropping) the least recent of them; it
 * is served through a bounce buffer now, and every L1 block stays. Once the
 * tier takes writes again, reads promote as before.
 */
static void test_failed_victim_tier_never_costs_l1_blocks(void **state)
{
	(void)state;
	struct fixture *f = fixture_new();
	assert_int_equal(hello(f, KVT_ROLE_WORKER, "m"), 0);
	assert_int_equal(tiers_set_evict(&f->stack, true), 0);
	f->m2.writable = false;
	int memfd = memfd_create("ops", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_int_equal(ftruncate(memfd, BLOCK), 0);
	uint8_t *staging = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	assert_true(staging != MAP_FAILED);
	f->conn->fds[f->conn->nfds++] = memfd;
	uint8_t p[KVT_REGISTER_BYTES];
	struct frame_register reg = {.kind = KVT_BUFFER_SHM, .size = BLOCK};
	assert_int_equal(call(f, KVT_OP_REGISTER, p, (uint32_t)frame_encode_register(p, &reg)), 0);
	uint32_t index;
	assert_int_equal(reply_decode_register(f->reply, f->reply_len, &index), 0);
	unsigned held = fill_l1_dirty(f, 1000);
	assert_true(held > 0 && f->l1.stats.dirty_items == held);

	uint8_t part[MEM_TIER_PART_BYTES];
	test_fill(part, sizeof(part), 7);
	struct kvt_key key = test_key(7);
	mem_tier_put(&f->m2, f->conn->ns, &key, 0, part, sizeof(part));
	struct kvt_block b = {.key = key, .offset = 0, .length = BLOCK};
	transfer(f, KVT_OP_LOAD, index, &b, 1);
	assert_int_equal(b.status, 0);
	assert_int_equal(b.length, sizeof(part));
	assert_true(test_check(staging, sizeof(part), 7));
	assert_int_equal(atomic_load(&f->m2.tier.counters.blocks_loaded), 1);
	assert_int_equal(atomic_load(&f->m2.tier.counters.blocks_promoted), 0);
	assert_int_equal(f->l1.stats.items, held);
	assert_int_equal(lookup_hits(f, 1000), 1); /* the least recent: the old daemon evicted it */

	f->m2.writable = true; /* victims can go down again: reads promote */
	transfer(f, KVT_OP_LOAD, index, &b, 1);
	assert_int_equal(b.status, 0);
	assert_int_equal(atomic_load(&f->m2.tier.counters.blocks_promoted), 1);
	munmap(staging, BLOCK);
	close(memfd);
	fixture_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checks_before_the_handler),
		cmocka_unit_test(test_store_then_load_byte_exact),
		cmocka_unit_test(test_failed_victim_tier_never_costs_l1_blocks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

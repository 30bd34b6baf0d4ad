/*
 * test_codec.c — the protocol codec (codec.h): every request and reply
 * encoded and decoded back field for field, in the byte layout of
 * docs/protocol.md, and the decoders' refusals.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "codec.h"
#include "test_util.h"
#include "wire.h"

static void test_hello_round_trip(void **state)
{
	(void)state;
	struct frame_hello in = {.version = KVT_PROTO_VERSION, .role = KVT_ROLE_WORKER,
				 .flags = KVT_HELLO_TIER3 | 0x80, .tp_size = 4, .rank = 3,
				 .block_bytes = 1u << 21,
				 .session = 0x1122334455667789ull, .model = "qwen3-8b", .salt = "s"};
	uint8_t p[KVT_HELLO_BYTES + 2 * KVT_MAX_NAME];
	size_t n = frame_encode_hello(p, &in);
	assert_int_equal(n, KVT_HELLO_BYTES + 8 + 1);
	struct wire_rd r = {p, n, false};
	assert_int_equal(wire_u16(&r), KVT_PROTO_VERSION); /* the layout: version first */
	assert_int_equal(wire_u8(&r), KVT_ROLE_WORKER);    /* then role, then flags */
	assert_int_equal(wire_u8(&r), KVT_HELLO_TIER3 | 0x80);
	struct frame_hello out;
	assert_int_equal(frame_decode_hello(p, n, &out), 0);
	assert_int_equal(out.version, in.version);
	assert_int_equal(out.role, in.role);
	assert_int_equal(out.flags, KVT_HELLO_TIER3 | 0x80); /* kept whole: the daemon ignores what it does not know */
	assert_int_equal(out.tp_size, 4);
	assert_int_equal(out.rank, 3);
	assert_int_equal(out.block_bytes, in.block_bytes);
	assert_int_equal(out.session, in.session);
	assert_string_equal(out.model, "qwen3-8b");
	assert_string_equal(out.salt, "s");
	assert_int_equal(frame_decode_hello(p, n - 1, &out), -EBADMSG); /* a name cut short */
	assert_int_equal(frame_decode_hello(p, n + 1, &out), -EBADMSG); /* a trailing byte */
	in.rank = 4;                                                      /* rank >= tp_size */
	n = frame_encode_hello(p, &in);
	assert_int_equal(frame_decode_hello(p, n, &out), -EINVAL);
}

/* Names are UTF-8: what is not could not be listed or exported (issue 36, item 19). */
static void test_hello_names_are_utf8(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		int ok;
	} cases[] = {
		{"qwen3-8b", 1}, {"mod\xc3\xa9le", 1}, {"\xe4\xb8\xad\xf0\x9f\x98\x80", 1},
		{"\xff", 0}, {"a\x80", 0}, {"\xc0\xaf", 0} /* overlong */, {"\xe0\x80\xaf", 0},
		{"\xed\xa0\x80", 0} /* a surrogate */, {"\xf4\x90\x80\x80", 0} /* past U+10FFFF */,
		{"\xc3", 0} /* cut short */, {"\xe4\xb8", 0},
	};
	uint8_t p[KVT_HELLO_BYTES + 2 * KVT_MAX_NAME];
	struct frame_hello out;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct frame_hello h = {.version = KVT_PROTO_VERSION, .tp_size = 1,
					.block_bytes = 4096};
		snprintf(h.model, sizeof(h.model), "%s", cases[i].name); /* as the model */
		size_t n = frame_encode_hello(p, &h);
		assert_int_equal(frame_decode_hello(p, n, &out), cases[i].ok ? 0 : -EINVAL);
		snprintf(h.model, sizeof(h.model), "m"); /* as the salt */
		snprintf(h.salt, sizeof(h.salt), "%s", cases[i].name);
		n = frame_encode_hello(p, &h);
		assert_int_equal(frame_decode_hello(p, n, &out), cases[i].ok ? 0 : -EINVAL);
	}
}

static void test_register_round_trip_every_kind(void **state)
{
	(void)state;
	static const struct {
		uint32_t kind;
		size_t bytes;
	} kinds[] = {{KVT_BUFFER_SHM, KVT_REGISTER_BYTES},
		     {KVT_BUFFER_CUDA_VMM, KVT_REGISTER_VMM_BYTES},
		     {KVT_BUFFER_CUDA_IPC, KVT_REGISTER_IPC_BYTES}};
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		struct frame_register in = {.kind = kinds[k].kind, .size = 12345, .offset = 77};
		memset(in.device_uuid, 0xd1, sizeof(in.device_uuid));
		memset(in.ipc_handle, 0x1c, sizeof(in.ipc_handle));
		uint8_t p[KVT_REGISTER_IPC_BYTES];
		size_t n = frame_encode_register(p, &in);
		assert_int_equal(n, kinds[k].bytes);
		struct frame_register out;
		memset(&out, 0, sizeof(out));
		assert_int_equal(frame_decode_register(p, n, &out), 0);
		assert_int_equal(out.kind, in.kind);
		assert_int_equal(out.size, 12345);
		if (in.kind != KVT_BUFFER_SHM)
			assert_memory_equal(out.device_uuid, in.device_uuid, KVT_UUID_BYTES);
		if (in.kind == KVT_BUFFER_CUDA_IPC) {
			assert_memory_equal(out.ipc_handle, in.ipc_handle, KVT_IPC_HANDLE_BYTES);
			assert_int_equal(out.offset, 77);
		}
		assert_int_equal(frame_decode_register(p, n - 1, &out), -EBADMSG);
	}
}

static void test_small_requests_round_trip(void **state)
{
	(void)state;
	uint8_t p[8];
	uint32_t u32;
	uint64_t u64;
	assert_int_equal(frame_encode_u32(p, 0xabcdef01u), 8);
	assert_int_equal(frame_decode_u32(p, 8, &u32), 0);
	assert_int_equal(u32, 0xabcdef01u);
	assert_int_equal(frame_decode_u32(p, 4, &u32), -EBADMSG);
	assert_int_equal(frame_encode_u64(p, 0x0102030405060708ull), 8);
	assert_int_equal(frame_decode_u64(p, 8, &u64), 0);
	assert_int_equal(u64, 0x0102030405060708ull);
	assert_int_equal(frame_decode_u64(p, 7, &u64), -EBADMSG);
}

static void test_lookup_and_blocks_round_trip(void **state)
{
	(void)state;
	struct kvt_key keys[3] = {test_key(1), test_key(2), test_key(3)};
	struct kvt_lookup lk = {.keys = keys, .nkeys = 3, .lease_ms = 500};
	uint8_t p[8 + 3 * KVT_BLOCK_ENTRY_BYTES];
	size_t n = frame_encode_lookup(p, &lk);
	assert_int_equal(n, 8 + 3 * KVT_KEY_BYTES);
	struct frame_lookup fl;
	assert_int_equal(frame_decode_lookup(p, n, &fl), 0);
	assert_int_equal(fl.nkeys, 3);
	assert_int_equal(fl.lease_ms, 500);
	assert_memory_equal(fl.keys, keys, sizeof(keys));
	assert_int_equal(frame_decode_lookup(p, n + 1, &fl), -EBADMSG);

	struct kvt_block b[3] = {{.key = keys[0], .offset = 0, .length = 10},
				 {.key = keys[1], .offset = 4096, .length = 20},
				 {.key = keys[2], .offset = 1ull << 40, .length = 30}};
	n = frame_encode_blocks(p, 9, b, 3);
	assert_int_equal(n, 8 + 3 * KVT_BLOCK_ENTRY_BYTES);
	struct frame_blocks fb;
	assert_int_equal(frame_decode_blocks(p, n, &fb), 0);
	assert_int_equal(fb.buffer, 9);
	assert_int_equal(fb.nblocks, 3);
	for (uint32_t i = 0; i < 3; i++) {
		struct frame_block e;
		frame_block_at(&fb, i, &e);
		assert_memory_equal(e.key.bytes, b[i].key.bytes, KVT_KEY_BYTES);
		assert_int_equal(e.offset, b[i].offset);
		assert_int_equal(e.length, b[i].length);
	}
	assert_int_equal(frame_decode_blocks(p, n - 1, &fb), -EBADMSG);
	struct wire_wr w = {p + 4, 4, false};
	wire_put_u32(&w, KVT_MAX_BLOCKS + 1);
	assert_int_equal(frame_decode_blocks(p, n, &fb), -E2BIG);
}

static void test_replies_round_trip(void **state)
{
	(void)state;
	uint8_t p[256];
	struct reply_hello hin = {0x8877665544332211ull, 5, KVT_MAX_BLOCKS, KVT_MAX_KEYS,
				  KVT_MAX_FRAME_BYTES}, hout;
	assert_int_equal(reply_encode_hello(p, &hin), KVT_HELLO_REPLY_BYTES);
	assert_int_equal(reply_decode_hello(p, KVT_HELLO_REPLY_BYTES, &hout), 0);
	assert_memory_equal(&hout, &hin, sizeof(hin));
	assert_int_equal(reply_decode_hello(p, KVT_HELLO_REPLY_BYTES - 1, &hout), -EBADMSG);

	uint32_t index = 0;
	assert_int_equal(reply_encode_register(p, 41), 8);
	assert_int_equal(reply_decode_register(p, 8, &index), 0);
	assert_int_equal(index, 41);

	struct kvt_key keys[2];
	uint8_t tiers[2] = {9, 9};
	struct kvt_lookup lk = {.keys = keys, .nkeys = 2, .tiers = tiers};
	assert_int_equal(reply_encode_lookup_head(p, 1, 2, 99), REPLY_LOOKUP_HEAD_BYTES);
	p[REPLY_LOOKUP_HEAD_BYTES] = 1;
	p[REPLY_LOOKUP_HEAD_BYTES + 1] = 0;
	assert_int_equal(reply_decode_lookup(p, REPLY_LOOKUP_HEAD_BYTES + 2, &lk), 0);
	assert_int_equal(lk.hits, 1);
	assert_int_equal(lk.lease_id, 99);
	assert_memory_equal(tiers, ((uint8_t[]){1, 0}), 2);

	struct kvt_block b[2] = {{.length = 100}, {.length = 100}};
	size_t n = reply_transfer_bytes(2);
	assert_int_equal(n, 8 + 2 * KVT_BLOCK_STATUS_BYTES);
	reply_encode_transfer_head(p, 2);
	reply_encode_transfer_block(p, 0, 0, 64);
	reply_encode_transfer_block(p, 1, -ENOENT, 0);
	assert_int_equal(reply_decode_transfer(p, n, true, b, 2), 0);
	assert_int_equal(b[0].status, 0);
	assert_int_equal(b[0].length, 64);
	assert_int_equal(b[1].status, -ENOENT);
}

/* A transfer reply of n blocks: statuses and lengths as given. */
static size_t transfer_reply(uint8_t *p, uint32_t n, const int32_t *status, const uint32_t *len)
{
	struct wire_wr w = {p, 8 + (size_t)n * 8, false};
	wire_put_u32(&w, n);
	wire_put_u32(&w, 0);
	for (uint32_t i = 0; i < n; i++) {
		wire_put_u32(&w, (uint32_t)status[i]);
		wire_put_u32(&w, len[i]);
	}
	return 8 + (size_t)n * 8;
}

static void test_reply_decoders(void **state)
{
	(void)state;
	uint8_t p[256];
	struct kvt_block b[2] = {{.length = 4096, .status = 7}, {.length = 4096, .status = 7}};
	size_t len = transfer_reply(p, 2, (int32_t[]){0, -ENOENT}, (uint32_t[]){100, 0});
	assert_int_equal(reply_decode_transfer(p, len, true, b, 2), 0);
	assert_int_equal(b[0].status, 0);
	assert_int_equal(b[0].length, 100);
	assert_int_equal(b[1].status, -ENOENT);
	assert_int_equal(b[1].length, 4096); /* a missing block keeps its space */
	/* Each refusal leaves the blocks as they were. */
	struct kvt_block before[2];
	memcpy(before, b, sizeof(b));
	len = transfer_reply(p, 2, (int32_t[]){0, 0}, (uint32_t[]){100, 5000});
	assert_int_equal(reply_decode_transfer(p, len, true, b, 2), -EBADMSG); /* past its space */
	assert_memory_equal(b, before, sizeof(b));
	assert_int_equal(reply_decode_transfer(p, len - 1, false, b, 2), -EBADMSG); /* short */
	assert_int_equal(reply_decode_transfer(p, len, false, b, 1), -EBADMSG); /* another count */
	len = transfer_reply(p, 2, (int32_t[]){3, 0}, (uint32_t[]){0, 0});
	assert_int_equal(reply_decode_transfer(p, len, false, b, 2), -EBADMSG); /* positive status */
	assert_memory_equal(b, before, sizeof(b));

	uint8_t tiers[3] = {9, 9, 9};
	struct kvt_key keys[3];
	struct kvt_lookup lk = {.keys = keys, .nkeys = 3, .tiers = tiers};
	struct wire_wr w = {p, 19, false};
	wire_put_u32(&w, 2);
	wire_put_u32(&w, 3);
	wire_put_u64(&w, 42);
	wire_put_bytes(&w, (const uint8_t[]){1, 2, 0}, 3);
	assert_int_equal(reply_decode_lookup(p, 19, &lk), 0);
	assert_int_equal(lk.hits, 2);
	assert_int_equal(lk.lease_id, 42);
	assert_memory_equal(tiers, ((uint8_t[]){1, 2, 0}), 3);
	assert_int_equal(reply_decode_lookup(p, 20, &lk), -EBADMSG); /* trailing byte */
	p[0] = 4;                                                          /* hits > nkeys */
	assert_int_equal(reply_decode_lookup(p, 19, &lk), -EBADMSG);
	p[0] = 2;
	p[16] = 3;                                                         /* L3 */
	assert_int_equal(reply_decode_lookup(p, 19, &lk), 0);
	assert_int_equal(tiers[0], KVT_TIER_MAX);
	p[16] = KVT_TIER_MAX + 1;                                          /* no such tier */
	assert_int_equal(reply_decode_lookup(p, 19, &lk), -EBADMSG);
	uint8_t out[8];
	assert_int_equal(reply_decode_fixed(p, 8, out, 8), 0);
	assert_int_equal(reply_decode_fixed(p, 7, out, 8), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_round_trip),
		cmocka_unit_test(test_hello_names_are_utf8),
		cmocka_unit_test(test_register_round_trip_every_kind),
		cmocka_unit_test(test_small_requests_round_trip),
		cmocka_unit_test(test_lookup_and_blocks_round_trip),
		cmocka_unit_test(test_replies_round_trip),
		cmocka_unit_test(test_reply_decoders),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

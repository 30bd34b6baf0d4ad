/* writer.c — see writer.h. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <xxhash.h>

#include "log.h"
#include "writer.h"

/* One item written behind from its slots: checksummed on the thread, then written. */
struct write_job {
	struct offload_job job;
	struct writer *w;
	struct l1_item *item;
	struct l2_direct direct;      /* last: its parts follow */
};

static struct write_job *job_of_direct(struct l2_direct *d)
{
	return (struct write_job *)((char *)d - offsetof(struct write_job, direct));
}

/* On the offload thread: the slots are pinned and unchanged until the release. */
static void checksum_parts(struct offload_job *job)
{
	struct write_job *j = (struct write_job *)job;
	for (uint16_t i = 0; i < j->direct.nparts; i++) {
		struct l2_direct_part *p = &j->direct.parts[i];
		p->checksum = XXH3_64bits(p->data, p->length);
	}
}

static void direct_done(struct l2_direct *d, int status)
{
	struct write_job *j = job_of_direct(d);
	if (status)
		log_debug("l2: a write behind failed (%s); its item stays dirty in L1",
			  kvt_strerror(status));
	l1_write_released(j->w->l1, j->item);
	free(j);
}

static void checksummed(struct offload_job *job)
{
	struct write_job *j = (struct write_job *)job;
	l2_direct_write(j->w->l2, &j->direct);
}

/* Written behind: reserved in L2 now, written from the slots once checksummed. */
static bool write_behind(struct writer *w, const struct l1_victim *v)
{
	struct write_job *j = malloc(sizeof(*j) + v->nparts * sizeof(j->direct.parts[0]));
	if (!j) {
		l2_write_victim(w->l2, v); /* the copying way needs no memory of its own */
		return false;
	}
	j->job = (struct offload_job){.run = checksum_parts, .done = checksummed};
	j->w = w;
	j->item = v->item;
	j->direct.done = direct_done;
	if (l2_direct_reserve(w->l2, v, &j->direct)) {
		free(j); /* counted by L2: present, behind, unfit, quota or off */
		return false;
	}
	offload_submit(&w->offload, &j->job);
	return true;
}

static bool take_victim_hook(void *ctx, const struct l1_victim *v)
{
	struct writer *w = ctx;
	if (!v->evicting && w->open)
		return write_behind(w, v);
	l2_write_victim(w->l2, v);
	return false;
}

static bool contains_hook(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key)
{
	return l2_contains(((struct writer *)ctx)->l2, ns, key);
}

static bool has_room_hook(void *ctx)
{
	return l2_has_room(((struct writer *)ctx)->l2);
}

static bool durable_hook(void *ctx, const struct kvt_ns *ns, const struct kvt_key *key)
{
	return l2_durable(((struct writer *)ctx)->l2, ns, key);
}

struct l1_lower_tier writer_lower_tier(struct writer *w)
{
	return (struct l1_lower_tier){w, contains_hook, take_victim_hook, has_room_hook,
				      durable_hook};
}

static void on_checksummed(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct writer *w = (struct writer *)((char *)src - offsetof(struct writer, done_src));
	offload_reap(&w->offload);
}

int writer_open(struct writer *w, struct l1 *l1, struct l2 *l2, struct loop *loop)
{
	*w = (struct writer){.l1 = l1, .l2 = l2, .loop = loop};
	int err = offload_open(&w->offload);
	if (err)
		return err;
	w->done_src = (struct loop_source){w->offload.done.eventfd, on_checksummed};
	if ((err = loop_add(loop, &w->done_src, EPOLLIN))) {
		offload_close(&w->offload);
		return err;
	}
	w->open = true;
	return 0;
}

void writer_close(struct writer *w)
{
	if (!w->open)
		return;
	w->open = false;
	loop_del(w->loop, &w->done_src);
	offload_close(&w->offload); /* the last jobs' writes are queued: l2_close waits for them */
}

/* loop.c — see loop.h. */
#include "config.h"

#include <errno.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "loop.h"

/* Events taken per epoll_wait: a batch, after which the hooks run. */
#define LOOP_BATCH 64

int loop_init(struct loop *l)
{
	*l = (struct loop){.epfd = epoll_create1(EPOLL_CLOEXEC), .wait_ms = -1};
	TAILQ_INIT(&l->hooks);
	return l->epfd < 0 ? -errno : 0;
}

void loop_destroy(struct loop *l)
{
	if (l->epfd >= 0)
		close(l->epfd);
	l->epfd = -1;
	TAILQ_INIT(&l->hooks);
}

static int ctl(struct loop *l, int op, struct loop_source *s, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = s};
	return epoll_ctl(l->epfd, op, s->fd, &ev) ? -errno : 0;
}

int loop_add(struct loop *l, struct loop_source *s, uint32_t events)
{
	return ctl(l, EPOLL_CTL_ADD, s, events);
}

int loop_mod(struct loop *l, struct loop_source *s, uint32_t events)
{
	return ctl(l, EPOLL_CTL_MOD, s, events);
}

void loop_del(struct loop *l, struct loop_source *s)
{
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, s->fd, NULL);
}

static void on_timer(struct loop_source *src, uint32_t events)
{
	(void)events;
	struct loop_timer *t = (struct loop_timer *)src;
	uint64_t ticks;
	if (read(src->fd, &ticks, sizeof(ticks)) > 0) /* several missed ticks: one run */
		t->run(t);
}

int loop_add_timer(struct loop *l, struct loop_timer *t, unsigned period_ms,
		   void (*run)(struct loop_timer *t))
{
	struct timespec period = {period_ms / 1000, (long)(period_ms % 1000) * 1000000L};
	struct itimerspec its = {.it_interval = period, .it_value = period};
	t->run = run;
	t->src = (struct loop_source){timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK),
				      on_timer};
	int err = t->src.fd < 0 || timerfd_settime(t->src.fd, 0, &its, NULL) ? -errno
									     : loop_add(l, &t->src, EPOLLIN);
	if (err && t->src.fd >= 0) {
		close(t->src.fd);
		t->src.fd = -1;
	}
	return err;
}

void loop_del_timer(struct loop *l, struct loop_timer *t)
{
	if (t->src.fd < 0)
		return;
	loop_del(l, &t->src);
	close(t->src.fd);
	t->src.fd = -1;
}

void loop_add_hook(struct loop *l, struct loop_hook *hook)
{
	TAILQ_INSERT_TAIL(&l->hooks, hook, link);
}

void loop_remove_hook(struct loop *l, struct loop_hook *hook)
{
	struct loop_hook *h;
	TAILQ_FOREACH(h, &l->hooks, link) {
		if (h == hook) { /* one never added, or removed already, is left alone */
			TAILQ_REMOVE(&l->hooks, hook, link);
			return;
		}
	}
}

void loop_wake_within(struct loop *l, int ms)
{
	if (l->wait_ms < 0 || ms < l->wait_ms)
		l->wait_ms = ms;
}

static void loop_run_hooks(struct loop *l)
{
	l->wait_ms = -1;
	for (struct loop_hook *h = TAILQ_FIRST(&l->hooks), *next; h; h = next) {
		next = TAILQ_NEXT(h, link); /* a hook may remove itself */
		h->run(h);
	}
}

int loop_run_once(struct loop *l, int timeout_ms)
{
	struct epoll_event evs[LOOP_BATCH];
	int n = epoll_wait(l->epfd, evs, LOOP_BATCH, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		struct loop_source *src = evs[i].data.ptr;
		src->on_event(src, evs[i].events);
	}
	loop_run_hooks(l);
	return 0;
}

int loop_run(struct loop *l)
{
	int err = 0;
	while (!l->stop && !err)
		err = loop_run_once(l, l->wait_ms);
	return err;
}

void loop_stop(struct loop *l)
{
	l->stop = true;
}

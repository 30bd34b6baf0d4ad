/*
 * handoff.h — how a worker thread hands things to the event loop: it posts
 * an item (any thread), the loop takes every posted item at once, oldest
 * first (the owner's thread). An eventfd, the owner's loop source, turns
 * readable when the list goes from empty to not; a post onto a list that
 * waits already writes nothing (one wake-up takes it all). Items are the
 * posters' structs with a struct handoff_item inside; nothing is copied.
 * Used by the copy engines, the offload thread, L2's index rebuild and L3's
 * keeper. Written by hand: ten lines over a mutex, where a library's queue
 * would bring its own loop.
 */
#ifndef KVTD_HANDOFF_H
#define KVTD_HANDOFF_H

#include <pthread.h>

struct handoff_item {
	struct handoff_item *next;
};

struct handoff {
	int eventfd;               /* readable while items wait; -1 until init */
	pthread_mutex_t lock;
	struct handoff_item *head, *tail;
};

/* An empty handoff with its eventfd. 0 or -errno. */
int handoff_init(struct handoff *h);
/* Closes the eventfd; items still posted are their posters' (take them first). */
void handoff_destroy(struct handoff *h);

/* Any thread: item joins the list. */
void handoff_post(struct handoff *h, struct handoff_item *item);
/* The owner: every item posted, oldest first (NULL: none); the eventfd is cleared. */
struct handoff_item *handoff_take(struct handoff *h);

#endif

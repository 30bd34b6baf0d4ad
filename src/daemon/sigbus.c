/* sigbus.c — see sigbus.h. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "sigbus.h"

/* volatile: the compiler must not drop or move the stores around the guarded
 * access, which it would otherwise see as dead (nothing it knows reads them). */
static __thread sigjmp_buf *volatile guard;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
	(void)si;
	(void)uctx;
	if (guard)
		siglongjmp(*guard, 1);
	signal(sig, SIG_DFL); /* not a guarded access: die as without the handler */
	raise(sig);
}

static void install(void)
{
	struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

void sigbus_guard_install(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install);
}

int sigbus_guarded_copy(void *dst, const void *src, size_t len)
{
	sigjmp_buf env;
	if (sigsetjmp(env, 0)) {
		guard = NULL;
		return -EFAULT;
	}
	guard = &env;
	memcpy(dst, src, len);
	guard = NULL;
	return 0;
}

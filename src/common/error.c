/* error.c — kvt_strerror(): messages for errno values and kvtier's own codes. */
#include "config.h"

#include <string.h>

#include "kvtier/kvtier.h"

static const char *const kvt_messages[KVT_ELAST - KVT_EBASE] = {
	[0] = "unknown kvtier error",
	[KVT_ENSCONFLICT - KVT_EBASE] =
		"namespace already exists with another block size or tensor-parallel size",
	[KVT_EALLPINNED - KVT_EBASE] =
		"no space: every evictable byte is pinned or leased",
	[KVT_ENOCUDA - KVT_EBASE] =
		"CUDA unavailable: built without CUDA, or no GPU or driver visible",
	[KVT_EQUOTA - KVT_EBASE] =
		"namespace quota reached: every block of the namespace is pinned or leased",
	[KVT_ENSLIMIT - KVT_EBASE] =
		"this client may create no more namespaces (max-namespaces-per-client, or its uid's max-namespaces-per-uid)",
};

const char *kvt_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err == 0)
		return "success";
	if (err >= KVT_EBASE && err < KVT_ELAST)
		return kvt_messages[err - KVT_EBASE] ? kvt_messages[err - KVT_EBASE]
						     : kvt_messages[0];
#ifdef HAVE_STRERRORDESC_NP
	/* strerrordesc_np is thread-safe and never touches errno. */
	const char *msg = strerrordesc_np(err);
	if (msg)
		return msg;
#endif
	return "unknown error";
}

const char *kvt_version(void)
{
	return PACKAGE_VERSION;
}

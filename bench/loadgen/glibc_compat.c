/*
 * Linked into bench/loadgen only with a libnfs.a built against a newer
 * glibc than this host's (bench/run's fallback when that libnfs's shared
 * library cannot load here: Debian 13's libnfs 5 on Debian 12).
 *
 * glibc 2.38 redirects strtol to __isoc23_strtol under _GNU_SOURCE (C23:
 * with base 0 or 2 it also reads a "0b" prefix), so Debian 13's libnfs.a
 * calls __isoc23_strtol, which glibc 2.36 does not have. Every call libnfs
 * 5.0.2 makes passes base 10 (URL options, a portmapper's port), where the
 * two functions are the same, and this one, strtol, is what a glibc before
 * 2.38 gives a program that calls strtol.
 */
#include <features.h>
#include <stdlib.h>

#if __GLIBC_PREREQ(2, 38)
#error "this glibc has __isoc23_strtol: link libnfs's shared library instead"
#endif

long __isoc23_strtol(const char *nptr, char **endptr, int base);

long __isoc23_strtol(const char *nptr, char **endptr, int base)
{
	return strtol(nptr, endptr, base);
}

/* clockshift: an LD_PRELOAD shim that steps a process's wall clock, and nothing else.
 *
 * odradek verify's clock faults (odradek_verify/clockshift.py compiles this at run time with the system C
 * compiler). It interposes only the wall clock: clock_gettime for CLOCK_REALTIME, CLOCK_REALTIME_COARSE and
 * CLOCK_TAI, gettimeofday, time and timespec_get, adding a signed offset in nanoseconds. CLOCK_MONOTONIC,
 * CLOCK_BOOTTIME, the CPU clocks and every sleep (nanosleep, clock_nanosleep, timed waits) are the kernel's,
 * untouched: that is what an NTP step does to a host (the wall clock steps, monotonic time does not).
 *
 * The offset lives in a small file named by ODRADEK_CLOCK_FILE, mapped read-only and shared, so a write by the
 * nemesis is seen at once by every thread without a syscall:
 *
 *     bytes 0..7   uint64 seq        odd while a write is in progress (a seqlock)
 *     bytes 8..15  int64  offset_ns  added to the wall clock
 *
 * (native byte order). The writer bumps seq to odd, writes the offset, bumps seq to even, each with one pwrite;
 * a reader retries while seq is odd or changed, and falls back to the last offset it read whole. Without the
 * variable, or with a file too short to hold both fields, the offset is 0 and the process runs as without it.
 */
#define _GNU_SOURCE
#define gettimeofday clockshift_hidden_gettimeofday /* glibc versions differ on its prototype: ours is below */
#include <sys/time.h>
#undef gettimeofday
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOCK_TAI
#define CLOCK_TAI 11
#endif

#define NS_PER_S 1000000000LL

struct clock_file {
    uint64_t seq;
    int64_t offset_ns;
};

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

static clock_gettime_fn real_clock_gettime;
static gettimeofday_fn real_gettimeofday;
static struct clock_file *shared;  /* NULL: no file, offset 0 */
static int64_t last_whole;         /* the last offset read whole, for a reader that meets a write */

int gettimeofday(struct timeval *tv, void *tz);

static void resolve(void) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    if (real_gettimeofday == NULL)
        real_gettimeofday = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
}

__attribute__((constructor)) static void clockshift_init(void) {
    resolve();
    const char *path = getenv("ODRADEK_CLOCK_FILE");
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(struct clock_file)) {
        void *p = mmap(NULL, sizeof(struct clock_file), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED)
            __atomic_store_n(&shared, (struct clock_file *)p, __ATOMIC_RELEASE);
    }
    close(fd);
}

static int64_t offset_ns(void) {
    struct clock_file *f = __atomic_load_n(&shared, __ATOMIC_ACQUIRE);
    if (f == NULL)
        return 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t s1 = __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1)
            continue;
        int64_t v = __atomic_load_n(&f->offset_ns, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&f->seq, __ATOMIC_RELAXED) == s1) {
            __atomic_store_n(&last_whole, v, __ATOMIC_RELAXED);
            return v;
        }
    }
    return __atomic_load_n(&last_whole, __ATOMIC_RELAXED);
}

static void shift(struct timespec *ts, int64_t off) {
    ts->tv_sec += (time_t)(off / NS_PER_S);
    ts->tv_nsec += (long)(off % NS_PER_S);
    if (ts->tv_nsec >= NS_PER_S) {
        ts->tv_nsec -= NS_PER_S;
        ts->tv_sec += 1;
    } else if (ts->tv_nsec < 0) {
        ts->tv_nsec += NS_PER_S;
        ts->tv_sec -= 1;
    }
}

static int real_now(clockid_t clk, struct timespec *ts) {
    resolve();
    if (real_clock_gettime != NULL)
        return real_clock_gettime(clk, ts);
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

static int is_wall(clockid_t clk) {
    return clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE || clk == CLOCK_TAI;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int rc = real_now(clk, ts);
    if (rc == 0 && is_wall(clk))
        shift(ts, offset_ns());
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    resolve();
    int rc = real_gettimeofday != NULL ? real_gettimeofday(tv, tz) : (int)syscall(SYS_gettimeofday, tv, tz);
    if (rc == 0 && tv != NULL) {
        struct timespec ts = {tv->tv_sec, (long)tv->tv_usec * 1000L};
        shift(&ts, offset_ns());
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = (suseconds_t)(ts.tv_nsec / 1000L);
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0)
        return 0;
    return base;
}

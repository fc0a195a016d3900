/*
 * The state directory's system calls and, in a KD_TEST_HOOKS build only, their fault hook (see
 * state_io.h). The crash sweep (tests/e2e/service/test_e2e_crash.c) kills the daemon at every call of a
 * put / pin / drop sequence in turn; the storage test (tests/e2e/service/test_e2e_storage.c) fills a
 * pretend file system where it cannot mount a small real one.
 */
#include "server/store/state_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/uio.h>

#ifdef KD_TEST_HOOKS
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

enum { KD_FAULT_NONE, KD_FAULT_COUNT, KD_FAULT_CRASH, KD_FAULT_STALL, KD_FAULT_CAPACITY };

static struct {
    int read; /* KD_TEST_FAULT parsed */
    int mode;
    long long crash_at; /* crash: the call to die at; stall: the call to hang at */
    long long capacity; /* capacity: bytes */
    char dir[512];      /* capacity: the tree it covers */
    int count_fd;       /* count: the file calls are listed in */
    long long calls;
} kd_fault = {.count_fd = -1};

static void kd_fault_read(void)
{
    kd_fault.read = 1;
    const char *spec = getenv("KD_TEST_FAULT");
    if (spec == NULL || spec[0] == '\0')
        return;
    if (strncmp(spec, "count:", 6) == 0) {
        kd_fault.count_fd = open(spec + 6, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        kd_fault.mode = kd_fault.count_fd >= 0 ? KD_FAULT_COUNT : KD_FAULT_NONE;
    } else if (strncmp(spec, "crash:", 6) == 0) {
        kd_fault.crash_at = atoll(spec + 6);
        kd_fault.mode = KD_FAULT_CRASH;
    } else if (strncmp(spec, "stall:", 6) == 0) {
        kd_fault.crash_at = atoll(spec + 6);
        kd_fault.mode = KD_FAULT_STALL;
    } else if (strncmp(spec, "capacity:", 9) == 0) {
        char *end;
        kd_fault.capacity = strtoll(spec + 9, &end, 10);
        if (*end == ':') {
            snprintf(kd_fault.dir, sizeof(kd_fault.dir), "%s", end + 1);
            kd_fault.mode = KD_FAULT_CAPACITY;
        }
    }
    if (kd_fault.mode == KD_FAULT_NONE) {
        fprintf(stderr,
                "krylovd_faults: KD_TEST_FAULT=%s is not count:FILE, crash:K, stall:K or "
                "capacity:BYTES:DIR\n",
                spec);
        _exit(2);
    }
}

/* Bytes of the regular files in dir and, depth times more, in its subdirectories, but for the
 * program cache's (solver/runtime/program_cache.c writes there itself, and how much depends on
 * which programs a run happens to build). */
static long long kd_fault_usage(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    long long total = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        if (S_ISREG(st.st_mode))
            total += st.st_size;
        else if (S_ISDIR(st.st_mode) && depth > 0 && strcmp(de->d_name, "programs") != 0)
            total += kd_fault_usage(path, depth - 1);
    }
    closedir(d);
    return total;
}

/* Count the call; die at the chosen one (crash), or hang there until killed (stall: a slow
 * disk, for a test to kill the daemon in the middle of a write). A write to die or hang at first
 * writes half of its bytes. */
static void kd_fault_point(const char *op, const char *path, int fd, const struct iovec *iov,
                           int iovcnt)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, kd_fault_read); /* the worker and the writer thread both call in */
    long long n = __atomic_add_fetch(&kd_fault.calls, 1, __ATOMIC_SEQ_CST);
    if (kd_fault.mode == KD_FAULT_COUNT)
        dprintf(kd_fault.count_fd, "%lld %s %s\n", n, op, path != NULL ? path : "-");
    if ((kd_fault.mode != KD_FAULT_CRASH && kd_fault.mode != KD_FAULT_STALL) ||
        n != kd_fault.crash_at)
        return;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    size_t half = total / 2;
    for (int i = 0; i < iovcnt && half > 0; i++) {
        size_t len = iov[i].iov_len < half ? iov[i].iov_len : half;
        ssize_t w = write(fd, iov[i].iov_base, len);
        (void)w;
        half -= len;
    }
    if (kd_fault.mode == KD_FAULT_STALL) {
        fprintf(stderr, "krylovd_faults: stalled at call %lld (%s)\n", n, op);
        for (;;)
            pause();
    }
    raise(SIGKILL);
}

/* capacity: how many of len bytes fit (len when no limit applies). */
static size_t kd_fault_room(size_t len)
{
    if (kd_fault.mode != KD_FAULT_CAPACITY)
        return len;
    long long left = kd_fault.capacity - kd_fault_usage(kd_fault.dir, 2);
    if (left <= 0)
        return 0;
    return (unsigned long long)left < len ? (size_t)left : len;
}
#else
#define kd_fault_point(op, path, fd, iov, iovcnt) ((void)0)
#define kd_fault_room(len) (len)
#endif

int kd_state_io_create(const char *path)
{
    kd_fault_point("create", path, -1, NULL, 0);
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
}

/* All of len bytes (EINTR and short writes retried): 0, or -1 with errno. */
static int kd_state_io_write_one(int fd, const char *p, size_t len)
{
    while (len > 0) {
        size_t chunk = kd_fault_room(len > ((size_t)1 << 30) ? (size_t)1 << 30 : len);
        if (chunk == 0) {
            errno = ENOSPC;
            return -1;
        }
        ssize_t n = write(fd, p, chunk);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int kd_state_io_write(int fd, const struct iovec *iov, int iovcnt)
{
    kd_fault_point("write", NULL, fd, iov, iovcnt);
    for (int i = 0; i < iovcnt; i++)
        if (kd_state_io_write_one(fd, iov[i].iov_base, iov[i].iov_len) != 0)
            return -1;
    return 0;
}

int kd_state_io_fsync(int fd)
{
    kd_fault_point("fsync", NULL, fd, NULL, 0);
    return fsync(fd);
}

int kd_state_io_fsync_dir(const char *dir)
{
    kd_fault_point("fsync-dir", dir, -1, NULL, 0);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int kd_state_io_rename(const char *from, const char *to)
{
    kd_fault_point("rename", to, -1, NULL, 0);
    return rename(from, to);
}

int kd_state_io_unlink(const char *path)
{
    kd_fault_point("unlink", path, -1, NULL, 0);
    return unlink(path);
}

int kd_state_io_mkdir(const char *path, mode_t mode)
{
    kd_fault_point("mkdir", path, -1, NULL, 0);
    return mkdir(path, mode);
}

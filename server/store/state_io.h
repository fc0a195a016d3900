/*
 * The system calls that change the state directory (server/store/state.c, server/store/owners.c),
 * in one place so that a test build can fail or kill the daemon at any one of them.
 *
 * Built normally, each is the plain call. Built with KD_TEST_HOOKS (the test-only daemon
 * krylovd_faults, tests/server/CMakeLists.txt; never installed), KD_TEST_FAULT in the environment picks a
 * fault, read once at the first call:
 *   count:FILE        append "<n> <op> <path>" to FILE for each call: how many a sequence makes
 *   crash:K           SIGKILL the process at the K-th call (1-based); a write first writes half its
 *                     bytes, so the file is torn as a crash mid-write would leave it
 *   capacity:BYTES:DIR  a write that would take the files under DIR (two levels, programs/ not
 *                     counted) past BYTES writes what fits and fails with ENOSPC, like a full
 *                     file system; deleting files makes room again
 * The calls are counted in the order they are made, by the worker and the writer thread both.
 */
#ifndef KD_SERVER_STATE_IO_H
#define KD_SERVER_STATE_IO_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

/* A new file for writing (O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode 0640): fd, or -1 with
 * errno. */
int kd_state_io_create(const char *path);

/* All the bytes of iov[0 .. iovcnt - 1], in order (EINTR and short writes retried): 0, or -1
 * with errno. One call however many pieces: a file's pieces are one write to the fault hook. */
int kd_state_io_write(int fd, const struct iovec *iov, int iovcnt);

int kd_state_io_fsync(int fd);

/* fsync of a directory, so that a rename or unlink in it is durable: 0, or -1 with errno. */
int kd_state_io_fsync_dir(const char *dir);

int kd_state_io_rename(const char *from, const char *to);
int kd_state_io_unlink(const char *path);
int kd_state_io_mkdir(const char *path, mode_t mode);

#endif

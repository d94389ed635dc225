/*
 * locktest: fcntl byte-range lock cases, modelled on Connectathon's lock
 * tests, run on an NFS mount by the Linux client (so every call below is
 * a call to the server: NLM over NFSv3, LOCK, LOCKT and LOCKU over
 * NFSv4). Built static on the host and run in the realclient guest from
 * the export.
 *
 *   locktest cthon FILE          two processes (parent, child) contend:
 *                                conflicts, TEST (F_GETLK) results,
 *                                upgrade/downgrade, splitting by a partial
 *                                unlock, EOF-to-infinity locks, blocking
 *                                lock granted after release (GRANTED)
 *   locktest try FILE START LEN  non-blocking write lock: prints
 *                                "granted" or "denied", exit 0
 *   locktest tryr FILE START LEN the same with a read lock
 *   locktest getlk FILE START LEN
 *                                F_GETLK for a write lock: prints
 *                                "unlocked", or the lock in the way as
 *                                "read|write START LEN" (LEN 0: to EOF)
 *   locktest wait FILE START LEN blocking write lock; prints "granted
 *                                after N ms" once held, then exits
 *   locktest hold FILE START LEN SIGNALFILE [GOFILE]
 *                                takes a write lock (blocking), prints
 *                                "held", holds it until SIGNALFILE exists,
 *                                then exits (which releases it). With
 *                                GOFILE: opens FILE at once, asks for the
 *                                lock once GOFILE exists and prints "held
 *                                after N ms" (from then)
 *   locktest holdr FILE START LEN SIGNALFILE [GOFILE]
 *                                the same with a read lock
 *
 * Any failed expectation prints "FAIL: ..." and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *who = "parent";

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void fail(const char *what)
{
    printf("FAIL (%s): %s (errno %d %s)\n", who, what, errno, strerror(errno));
    fflush(stdout);
    exit(1);
}

static int setlk(int fd, int cmd, short type, off_t start, off_t len)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &fl);
}

/* 1 if the lock could be had now, 0 if another owner holds a conflict. */
static int try_lock(int fd, short type, off_t start, off_t len)
{
    if (setlk(fd, F_SETLK, type, start, len) == 0)
        return 1;
    if (errno == EAGAIN || errno == EACCES)
        return 0;
    fail("F_SETLK");
    return -1;
}

static void must(int ok, const char *what)
{
    if (!ok) {
        printf("FAIL (%s): %s\n", who, what);
        fflush(stdout);
        exit(1);
    }
    printf("ok (%s): %s\n", who, what);
    fflush(stdout);
}

/* Parent and child step in turn through two pipes. */
static int to_child[2], to_parent[2];
static void signal_peer(int fd) { char c = 1; if (write(fd, &c, 1) != 1) fail("pipe write"); }
static void wait_peer(int fd) { char c; if (read(fd, &c, 1) != 1) fail("pipe read"); }

static int cthon(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT, 0666);
    if (fd < 0)
        fail("open");
    if (ftruncate(fd, 4096) != 0)
        fail("ftruncate");
    if (pipe(to_child) || pipe(to_parent))
        fail("pipe");
    pid_t pid = fork();
    if (pid < 0)
        fail("fork");
    if (pid == 0) {
        who = "child";
        close(to_child[1]);
        close(to_parent[0]);
        int cfd = open(path, O_RDWR);
        if (cfd < 0)
            fail("open");
        /* 1: parent holds W [0,100) */
        wait_peer(to_child[0]);
        must(!try_lock(cfd, F_RDLCK, 50, 10), "read lock inside another's write lock denied");
        must(try_lock(cfd, F_WRLCK, 100, 10), "write lock just past it granted");
        struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
        if (fcntl(cfd, F_GETLK, &q) != 0)
            fail("F_GETLK");
        must(q.l_type == F_WRLCK && q.l_start == 0 && q.l_len == 100,
             "F_GETLK names the write lock [0,100)");
        q = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 200, .l_len = 10};
        if (fcntl(cfd, F_GETLK, &q) != 0)
            fail("F_GETLK");
        must(q.l_type == F_UNLCK, "F_GETLK of a free range: unlocked");
        setlk(cfd, F_SETLK, F_UNLCK, 100, 10);
        signal_peer(to_parent[1]);
        /* 2: parent downgraded [0,100) to read */
        wait_peer(to_child[0]);
        must(try_lock(cfd, F_RDLCK, 0, 50), "read lock shares a downgraded lock");
        must(!try_lock(cfd, F_WRLCK, 60, 10), "write lock on a read-locked range denied");
        setlk(cfd, F_SETLK, F_UNLCK, 0, 0);
        signal_peer(to_parent[1]);
        /* 3: parent upgraded to W [0,100) and unlocked [40,60) */
        wait_peer(to_child[0]);
        must(try_lock(cfd, F_WRLCK, 45, 10), "the hole of a split lock is free");
        must(!try_lock(cfd, F_RDLCK, 30, 1), "the left part of a split lock holds");
        must(!try_lock(cfd, F_RDLCK, 70, 1), "the right part of a split lock holds");
        setlk(cfd, F_SETLK, F_UNLCK, 0, 0);
        signal_peer(to_parent[1]);
        /* 4: parent holds W [1000, EOF and beyond) */
        wait_peer(to_child[0]);
        must(!try_lock(cfd, F_WRLCK, (off_t)1 << 40, 1), "a lock to EOF covers offsets past the end");
        must(try_lock(cfd, F_WRLCK, 0, 1000), "and nothing before its start");
        setlk(cfd, F_SETLK, F_UNLCK, 0, 0);
        signal_peer(to_parent[1]);
        /* 5: parent holds W [0,10) and releases it in 2 s: wait for it */
        wait_peer(to_child[0]);
        long long t0 = now_ms();
        if (setlk(cfd, F_SETLKW, F_WRLCK, 0, 10) != 0)
            fail("F_SETLKW");
        long long waited = now_ms() - t0;
        printf("blocking lock granted after %lld ms\n", waited);
        /* Released at 2 s. The client learns of the release locally
         * first, so its LOCK may reach the server before the parent's
         * UNLOCK: then it is BLOCKED and granted by the server's GRANTED
         * callback; without one the client polls again after 30 s. */
        must(waited >= 1500 && waited < 15000, "blocking lock granted soon after the release");
        setlk(cfd, F_SETLK, F_UNLCK, 0, 0);
        signal_peer(to_parent[1]);
        _exit(0);
    }
    close(to_child[0]);
    close(to_parent[1]);
    must(try_lock(fd, F_WRLCK, 0, 100), "write lock [0,100)");
    signal_peer(to_child[1]);
    wait_peer(to_parent[0]);
    must(try_lock(fd, F_RDLCK, 0, 100), "downgrade to a read lock");
    signal_peer(to_child[1]);
    wait_peer(to_parent[0]);
    must(try_lock(fd, F_WRLCK, 0, 100), "upgrade back to a write lock");
    if (setlk(fd, F_SETLK, F_UNLCK, 40, 20) != 0)
        fail("partial unlock");
    signal_peer(to_child[1]);
    wait_peer(to_parent[0]);
    setlk(fd, F_SETLK, F_UNLCK, 0, 0);
    must(try_lock(fd, F_WRLCK, 1000, 0), "write lock from 1000 to EOF and beyond");
    signal_peer(to_child[1]);
    wait_peer(to_parent[0]);
    setlk(fd, F_SETLK, F_UNLCK, 0, 0);
    must(try_lock(fd, F_WRLCK, 0, 10), "write lock [0,10) for the waiter");
    signal_peer(to_child[1]);
    sleep(2);
    setlk(fd, F_SETLK, F_UNLCK, 0, 10);
    wait_peer(to_parent[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid)
        fail("waitpid");
    must(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child passed");
    printf("cthon: all passed\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "cthon"))
        return cthon(argv[2]);
    if (argc >= 5) {
        const char *cmd = argv[1];
        short type = F_WRLCK;
        if (!strcmp(cmd, "tryr") || !strcmp(cmd, "holdr")) {
            type = F_RDLCK;
            cmd = !strcmp(cmd, "tryr") ? "try" : "hold";
        }
        int fd = open(argv[2], (type == F_RDLCK ? O_RDONLY : O_RDWR) | O_CREAT, 0666);
        if (fd < 0)
            fail("open");
        off_t start = atoll(argv[3]), len = atoll(argv[4]);
        if (!strcmp(cmd, "try") && argc == 5) {
            printf("%s\n", try_lock(fd, type, start, len) ? "granted" : "denied");
            return 0;
        }
        if (!strcmp(cmd, "getlk") && argc == 5) {
            struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
            if (fcntl(fd, F_GETLK, &q) != 0)
                fail("F_GETLK");
            if (q.l_type == F_UNLCK)
                printf("unlocked\n");
            else
                printf("%s %lld %lld\n", q.l_type == F_WRLCK ? "write" : "read",
                       (long long)q.l_start, (long long)q.l_len);
            return 0;
        }
        if (!strcmp(cmd, "wait") && argc == 5) {
            long long t0 = now_ms();
            if (setlk(fd, F_SETLKW, F_WRLCK, start, len) != 0)
                fail("F_SETLKW");
            printf("granted after %lld ms\n", now_ms() - t0);
            return 0;
        }
        if (!strcmp(cmd, "hold") && (argc == 6 || argc == 7)) {
            struct stat st;
            if (argc == 7)
                while (stat(argv[6], &st) != 0)
                    usleep(100000);
            long long t0 = now_ms();
            if (setlk(fd, F_SETLKW, type, start, len) != 0)
                fail("F_SETLKW");
            if (argc == 7)
                printf("held after %lld ms\n", now_ms() - t0);
            else
                printf("held\n");
            while (stat(argv[5], &st) != 0)
                usleep(200000);
            return 0;
        }
    }
    fprintf(stderr, "usage: see the comment at the top of locktest.c\n");
    return 2;
}

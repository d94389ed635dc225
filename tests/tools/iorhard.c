/*
 * iorhard: concurrent NFSv3 READ/WRITE patterns for the data-plane tests
 * (tests/integration/test_dataplane.py). libnfs raw API; every client is a
 * separate process with its own TCP connection, and keeps several calls in
 * flight on it.
 *
 * Build: cc -O2 -Wall -o iorhard iorhard.c -lnfs      (libnfs-dev)
 *
 * Usage: iorhard [-u UID] [-g GID] [-p NFSPORT] [-m MOUNTPORT] [-q QD] [-s SEED]
 *                [-S unstable|data_sync|file_sync|mixed] [-o up|down|shuffle]
 *                SERVER EXPORT CMD [ARGS...]
 *
 *   ior FILE CLIENTS RECORDS RECSIZE
 *       The IOR-hard pattern: CLIENTS processes (one connection each) write
 *       their RECORDS records of RECSIZE bytes into one shared FILE (created
 *       if missing, never truncated): record i of client c at offset
 *       (i*CLIENTS + c) * RECSIZE, QD WRITEs in flight per connection, order
 *       -o (default up), stability -S (default mixed: client c uses
 *       UNSTABLE, DATA_SYNC, FILE_SYNC for c%3 = 0, 1, 2; UNSTABLE writers
 *       COMMIT at the end). All clients start together. When every client is
 *       done, all of them read the whole file back (QD READs in flight) and
 *       check every byte and the size (GETATTR). With -r N, N more processes
 *       (connections) READ random misaligned ranges (up to two records
 *       long) while the writers write, until they are done: every byte read
 *       must be 0 (not written yet) or its final value, no READ may return
 *       data past the final size, and every post-op size must be a record
 *       boundary (all WRITEs end on one). The post-op sizes in WRITE replies
 *       must be record boundaries too.
 *   pattern CLIENTS RECORDS RECSIZE
 *       Print the file image `ior` must produce (the model) on stdout.
 *   stream FILE SIZE write|read|both
 *       One connection: write SIZE bytes sequentially in -x XFER transfers
 *       (default 1 MiB, QD in flight, UNSTABLE + COMMIT), and/or read them
 *       back and verify. -P K/N: read only part K (from 0) of N equal parts
 *       of the transfers (clients reading their own parts of one file).
 *   readloop FILE OFF SECONDS
 *       READ OFF, -x bytes, back to back (QD in flight) for SECONDS; fails
 *       if a reply has count 0 without eof (a Linux client makes that EIO).
 *   readraw FILE OFF LEN [OFF LEN]...
 *       One READ per pair; the data goes to stdout, and one line per READ
 *       "status=S count=N eof=E" to stderr (status NFS3_OK or the error).
 *
 * Record contents: pattern(seed, c, i, j) = byte j of a SplitMix64 stream
 * keyed by (seed, client c, record i): deterministic per (client, record,
 * byte). stream uses client 0xffffffff and record = offset / XFER.
 *
 * Output: key=value lines. A mismatch prints
 *   mismatch client=R record=I off=O first_bad=B expected=0xEE got=0xGG bad_bytes=N
 * (client/record of the record's writer, B the absolute file offset) and
 * the last line is result=ok or result=fail. Exit: 0 ok, 1 data/NFS errors,
 * 2 transport failure or usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-mount.h>
#include <nfsc/libnfs-raw-nfs.h>

#define STALL_TIMEOUT_MS 60000
#define MAX_REPORTS 10

struct fh {
    unsigned len;
    char data[NFS3_FHSIZE];
};

static const char *server, *export_path;
static int nfs_port = 2049, mount_port = 20048, uid = -1, gid = -1;
static int qd = 4;
static uint64_t seed = 1;
static const char *stable_opt = "mixed", *order_opt = "up";
static uint32_t xfer = 1 << 20;
static uint32_t nreaders; /* -r: extra processes reading while the writers write */
static uint32_t part, parts = 1; /* -P K/N: stream reads part K of N */
static int me = -1; /* client number in this process, -1 = parent */

static struct rpc_context *rpc;
static struct fh root, file;
static int inflight, failures, reports;
static struct timespec last_progress;

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "iorhard%s: ", me >= 0 ? " client" : "");
    if (me >= 0)
        fprintf(stderr, "%d: ", me);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(code);
}

static const char *nfsstat_name(int s)
{
    switch (s) {
    case 0: return "NFS3_OK";
    case 1: return "NFS3ERR_PERM";
    case 2: return "NFS3ERR_NOENT";
    case 5: return "NFS3ERR_IO";
    case 13: return "NFS3ERR_ACCES";
    case 22: return "NFS3ERR_INVAL";
    case 27: return "NFS3ERR_FBIG";
    case 28: return "NFS3ERR_NOSPC";
    case 70: return "NFS3ERR_STALE";
    case 10001: return "NFS3ERR_BADHANDLE";
    case 10006: return "NFS3ERR_SERVERFAULT";
    case 10008: return "NFS3ERR_JUKEBOX";
    }
    return "NFS3ERR_OTHER";
}

/* ---------------------------------------------------------------- pattern */

static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Bytes [from, from+len) of record (c, i). */
static void fill(uint8_t *dst, uint32_t c, uint64_t i, uint64_t from, uint64_t len)
{
    uint64_t key = mix64(seed ^ mix64(((uint64_t)c << 40) ^ i ^ 0x5bd1e995ULL));
    uint64_t j = from;
    while (j < from + len) {
        uint64_t w = j / 8, v = mix64(key + w);
        unsigned k = j % 8;
        for (; k < 8 && j < from + len; k++, j++)
            *dst++ = (uint8_t)(v >> (8 * k));
    }
}

/* ---------------------------------------------------------------- rpc plumbing */

static void now(struct timespec *t) { clock_gettime(CLOCK_MONOTONIC, t); }

static long ms_since(const struct timespec *t)
{
    struct timespec n;
    now(&n);
    return (n.tv_sec - t->tv_sec) * 1000 + (n.tv_nsec - t->tv_nsec) / 1000000;
}

/* Service the connection until at most `max` calls are in flight. */
static void pump(int max)
{
    while (inflight > max) {
        struct pollfd pfd = {.fd = rpc_get_fd(rpc), .events = rpc_which_events(rpc)};
        int n = poll(&pfd, 1, 100);
        if (n < 0 && errno != EINTR)
            die(2, "poll: %s", strerror(errno));
        if (rpc_service(rpc, n > 0 ? pfd.revents : 0) < 0)
            die(2, "rpc_service: %s (%d calls in flight)", rpc_get_error(rpc), inflight);
        if (ms_since(&last_progress) > STALL_TIMEOUT_MS)
            die(2, "no reply for %d s (%d calls in flight)", STALL_TIMEOUT_MS / 1000, inflight);
    }
}

struct simple {
    int done, status;
    void *res;
    void (*fn)(void *res, struct simple *s);
    int nfsstatus;
    struct fh fh;
    uint64_t size;
    char verf[NFS3_WRITEVERFSIZE];
};

static void simple_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    struct simple *s = priv;
    (void)r;
    inflight--;
    now(&last_progress);
    s->done = 1;
    s->status = status;
    if (status != RPC_STATUS_SUCCESS)
        die(2, "RPC failed: %s", data ? (const char *)data : "cancelled");
    if (s->fn)
        s->fn(data, s);
}

static void simple_wait(struct simple *s, int r, const char *what)
{
    if (r != 0)
        die(2, "%s: %s", what, rpc_get_error(rpc));
    inflight++;
    now(&last_progress);
    pump(0);
    (void)s;
}

static void connect_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    (void)r;
    (void)data;
    *(int *)priv = status == RPC_STATUS_SUCCESS ? 1 : -1;
}

static struct rpc_context *connect_to(int port, int prog, int vers)
{
    struct rpc_context *c = rpc_init_context();
    int done = 0;
    struct timespec t0;
    if (!c)
        die(2, "rpc_init_context failed");
    if (uid >= 0)
        rpc_set_uid(c, uid);
    if (gid >= 0)
        rpc_set_gid(c, gid);
    if (rpc_connect_port_async(c, server, port, prog, vers, connect_cb, &done) != 0)
        die(2, "connect %s:%d: %s", server, port, rpc_get_error(c));
    now(&t0);
    while (!done) {
        struct pollfd pfd = {.fd = rpc_get_fd(c), .events = rpc_which_events(c)};
        int n = poll(&pfd, 1, 100);
        if (rpc_service(c, n > 0 ? pfd.revents : 0) < 0)
            die(2, "connect %s:%d: %s", server, port, rpc_get_error(c));
        if (ms_since(&t0) > 30000)
            die(2, "connect %s:%d: timed out", server, port);
    }
    if (done < 0)
        die(2, "connect %s:%d failed: %s", server, port, rpc_get_error(c));
    return c;
}

static void mnt_fn(void *res, struct simple *s)
{
    mountres3 *r = res;
    s->nfsstatus = r->fhs_status;
    if (r->fhs_status == MNT3_OK) {
        fhandle3 *h = &r->mountres3_u.mountinfo.fhandle;
        s->fh.len = h->fhandle3_len > NFS3_FHSIZE ? NFS3_FHSIZE : h->fhandle3_len;
        memcpy(s->fh.data, h->fhandle3_val, s->fh.len);
    }
}

static nfs_fh3 as_fh3(struct fh *f)
{
    nfs_fh3 r;
    r.data.data_len = f->len;
    r.data.data_val = f->data;
    return r;
}

static void copy_fh(struct fh *dst, const nfs_fh3 *src)
{
    dst->len = src->data.data_len > NFS3_FHSIZE ? NFS3_FHSIZE : src->data.data_len;
    memcpy(dst->data, src->data.data_val, dst->len);
}

static void lookup_fn(void *res, struct simple *s)
{
    LOOKUP3res *r = res;
    s->nfsstatus = r->status;
    if (r->status == NFS3_OK)
        copy_fh(&s->fh, &r->LOOKUP3res_u.resok.object);
}

static void create_fn(void *res, struct simple *s)
{
    CREATE3res *r = res;
    s->nfsstatus = r->status;
    if (r->status == NFS3_OK && r->CREATE3res_u.resok.obj.handle_follows)
        copy_fh(&s->fh, &r->CREATE3res_u.resok.obj.post_op_fh3_u.handle);
}

static void getattr_fn(void *res, struct simple *s)
{
    GETATTR3res *r = res;
    s->nfsstatus = r->status;
    if (r->status == NFS3_OK)
        s->size = r->GETATTR3res_u.resok.obj_attributes.size;
}

static void commit_fn(void *res, struct simple *s)
{
    COMMIT3res *r = res;
    s->nfsstatus = r->status;
    if (r->status == NFS3_OK)
        memcpy(s->verf, r->COMMIT3res_u.resok.verf, NFS3_WRITEVERFSIZE);
}

/* MNT the export (separate connection, closed after), connect NFS, resolve
 * FILE (path relative to the export root) or create it (UNCHECKED, 0666). */
static void open_file(const char *path, int create)
{
    struct simple s;
    char *copy, *tok, *save = NULL, *next;
    struct fh cur;

    rpc = connect_to(mount_port, MOUNT_PROGRAM, MOUNT_V3);
    memset(&s, 0, sizeof(s));
    s.fn = mnt_fn;
    simple_wait(&s, rpc_mount3_mnt_async(rpc, simple_cb, (char *)export_path, &s), "MNT");
    if (s.nfsstatus != MNT3_OK)
        die(2, "MNT %s: status %d", export_path, s.nfsstatus);
    root = s.fh;
    rpc_destroy_context(rpc);

    rpc = connect_to(nfs_port, NFS_PROGRAM, NFS_V3);
    cur = root;
    copy = strdup(path);
    for (tok = strtok_r(copy, "/", &save); tok; tok = next) {
        LOOKUP3args a;
        next = strtok_r(NULL, "/", &save);
        memset(&s, 0, sizeof(s));
        s.fn = lookup_fn;
        a.what.dir = as_fh3(&cur);
        a.what.name = tok;
        simple_wait(&s, rpc_nfs3_lookup_async(rpc, simple_cb, &a, &s), "LOOKUP");
        if (s.nfsstatus == NFS3ERR_NOENT && !next && create) {
            CREATE3args c;
            memset(&c, 0, sizeof(c));
            memset(&s, 0, sizeof(s));
            s.fn = create_fn;
            c.where.dir = as_fh3(&cur);
            c.where.name = tok;
            c.how.mode = UNCHECKED;
            c.how.createhow3_u.obj_attributes.mode.set_it = 1;
            c.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0666;
            simple_wait(&s, rpc_nfs3_create_async(rpc, simple_cb, &c, &s), "CREATE");
            if (s.nfsstatus == NFS3_OK && !s.fh.len) {
                /* no handle in the reply: look it up */
                memset(&s, 0, sizeof(s));
                s.fn = lookup_fn;
                simple_wait(&s, rpc_nfs3_lookup_async(rpc, simple_cb, &a, &s), "LOOKUP");
            }
        }
        if (s.nfsstatus != NFS3_OK)
            die(2, "resolving %s: %s at %s", path, nfsstat_name(s.nfsstatus), tok);
        cur = s.fh;
    }
    free(copy);
    file = cur;
}

static uint64_t getattr_size(void)
{
    struct simple s;
    GETATTR3args a = {.object = as_fh3(&file)};
    memset(&s, 0, sizeof(s));
    s.fn = getattr_fn;
    simple_wait(&s, rpc_nfs3_getattr_async(rpc, simple_cb, &a, &s), "GETATTR");
    if (s.nfsstatus != NFS3_OK)
        die(2, "GETATTR: %s", nfsstat_name(s.nfsstatus));
    return s.size;
}

/* ---------------------------------------------------------------- READ / WRITE */

static char write_verf[NFS3_WRITEVERFSIZE];
static uint32_t size_quantum; /* ior: every size the server reports is a multiple of this */
static int have_verf, short_writes, short_reads;

struct io {
    uint32_t client;    /* record owner (pattern key) */
    uint64_t rec;
    uint64_t rec_start; /* file offset of the record's byte 0 */
    uint64_t off;       /* this call: file offset, length */
    uint32_t len;
    int stable;
    uint8_t *buf;       /* WRITE payload, or expected READ data */
    uint64_t bad_bytes;
    int reported;
};

static void submit_write(struct io *io);
static void submit_read(struct io *io);

static void check_verf(const char *v, const char *what)
{
    if (!have_verf) {
        memcpy(write_verf, v, NFS3_WRITEVERFSIZE);
        have_verf = 1;
    } else if (memcmp(write_verf, v, NFS3_WRITEVERFSIZE)) {
        printf("error=write verifier changed (%s)\n", what);
        failures++;
    }
}

static void write_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    struct io *io = priv;
    WRITE3res *res = data;
    (void)r;
    inflight--;
    now(&last_progress);
    if (status != RPC_STATUS_SUCCESS)
        die(2, "WRITE off=%" PRIu64 " len=%u: RPC failed: %s", io->off, io->len,
            data ? (const char *)data : "cancelled");
    if (res->status != NFS3_OK) {
        printf("error=WRITE client=%u record=%" PRIu64 " off=%" PRIu64 " len=%u status=%s\n",
               io->client, io->rec, io->off, io->len, nfsstat_name(res->status));
        failures++;
        return;
    }
    check_verf(res->WRITE3res_u.resok.verf, "WRITE");
    if (size_quantum && res->WRITE3res_u.resok.file_wcc.after.attributes_follow) {
        uint64_t size = res->WRITE3res_u.resok.file_wcc.after.post_op_attr_u.attributes.size;
        if (size % size_quantum) {
            failures++;
            if (reports++ < MAX_REPORTS)
                printf("wcc_size WRITE off=%" PRIu64 " len=%u: post-op size %" PRIu64
                       " is no record boundary (%u)\n", io->off, io->len, size, size_quantum);
        }
    }
    if (res->WRITE3res_u.resok.count > io->len) {
        printf("error=WRITE off=%" PRIu64 " len=%u: count %u > len\n", io->off, io->len,
               res->WRITE3res_u.resok.count);
        failures++;
    } else if (res->WRITE3res_u.resok.count < io->len) {
        uint32_t c = res->WRITE3res_u.resok.count;
        short_writes++;
        if (c == 0) {
            printf("error=WRITE off=%" PRIu64 " len=%u: count 0\n", io->off, io->len);
            failures++;
            return;
        }
        io->off += c;
        io->len -= c;
        io->buf += c;
        submit_write(io); /* the rest, like a real client */
    }
}

static void submit_write(struct io *io)
{
    WRITE3args a;
    memset(&a, 0, sizeof(a));
    a.file = as_fh3(&file);
    a.offset = io->off;
    a.count = io->len;
    a.stable = io->stable;
    a.data.data_len = io->len;
    a.data.data_val = (char *)io->buf;
    if (rpc_nfs3_write_async(rpc, write_cb, &a, io) != 0)
        die(2, "WRITE: %s", rpc_get_error(rpc));
    inflight++;
}

static void read_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    struct io *io = priv;
    READ3res *res = data;
    (void)r;
    inflight--;
    now(&last_progress);
    if (status != RPC_STATUS_SUCCESS)
        die(2, "READ off=%" PRIu64 " len=%u: RPC failed: %s", io->off, io->len,
            data ? (const char *)data : "cancelled");
    if (res->status != NFS3_OK) {
        printf("error=READ client=%u record=%" PRIu64 " off=%" PRIu64 " len=%u status=%s\n",
               io->client, io->rec, io->off, io->len, nfsstat_name(res->status));
        failures++;
        return;
    }
    {
        READ3resok *ok = &res->READ3res_u.resok;
        uint32_t n = ok->data.data_len;
        const uint8_t *got = (const uint8_t *)ok->data.data_val;
        if (n > io->len || ok->count != n) {
            printf("error=READ off=%" PRIu64 " len=%u: count=%u data_len=%u\n", io->off,
                   io->len, ok->count, n);
            failures++;
            return;
        }
        for (uint32_t k = 0; k < n; k++) {
            if (got[k] != io->buf[k]) {
                uint64_t bad = 0;
                for (uint32_t q = k; q < n; q++)
                    bad += got[q] != io->buf[q];
                io->bad_bytes += bad;
                if (!io->reported && reports < MAX_REPORTS) {
                    printf("mismatch client=%u record=%" PRIu64 " off=%" PRIu64
                           " first_bad=%" PRIu64 " expected=0x%02x got=0x%02x bad_bytes=%" PRIu64
                           "\n", io->client, io->rec, io->rec_start, io->off + k, io->buf[k],
                           got[k], bad);
                    reports++;
                }
                io->reported = 1;
                failures++;
                break;
            }
        }
        if (n < io->len) {
            if (ok->eof) {
                printf("error=READ off=%" PRIu64 " len=%u: short (%u) with eof: file too small\n",
                       io->off, io->len, n);
                failures++;
                return;
            }
            if (n == 0) {
                printf("error=READ off=%" PRIu64 " len=%u: 0 bytes without eof\n", io->off,
                       io->len);
                failures++;
                return;
            }
            short_reads++;
            io->off += n;
            io->len -= n;
            io->buf += n;
            submit_read(io);
        }
    }
}

static void submit_read(struct io *io)
{
    READ3args a;
    memset(&a, 0, sizeof(a));
    a.file = as_fh3(&file);
    a.offset = io->off;
    a.count = io->len;
    if (rpc_nfs3_read_async(rpc, read_cb, &a, io) != 0)
        die(2, "READ: %s", rpc_get_error(rpc));
    inflight++;
}

static void commit(void)
{
    struct simple s;
    COMMIT3args a = {.file = as_fh3(&file), .offset = 0, .count = 0};
    memset(&s, 0, sizeof(s));
    s.fn = commit_fn;
    simple_wait(&s, rpc_nfs3_commit_async(rpc, simple_cb, &a, &s), "COMMIT");
    if (s.nfsstatus != NFS3_OK) {
        printf("error=COMMIT status=%s\n", nfsstat_name(s.nfsstatus));
        failures++;
        return;
    }
    check_verf(s.verf, "COMMIT");
}

static int stable_for(int client)
{
    if (!strcmp(stable_opt, "unstable"))
        return UNSTABLE;
    if (!strcmp(stable_opt, "data_sync"))
        return DATA_SYNC;
    if (!strcmp(stable_opt, "file_sync"))
        return FILE_SYNC;
    return client % 3; /* mixed */
}

/* A permutation of 0..n-1 by -o. */
static uint64_t *order(uint64_t n, uint32_t salt)
{
    uint64_t *o = malloc(n * sizeof(*o) + 1);
    for (uint64_t i = 0; i < n; i++)
        o[i] = !strcmp(order_opt, "down") ? n - 1 - i : i;
    if (!strcmp(order_opt, "shuffle")) {
        uint64_t st = mix64(seed ^ salt);
        for (uint64_t i = n; i > 1; i--) {
            uint64_t j = (st = mix64(st)) % i, t = o[i - 1];
            o[i - 1] = o[j];
            o[j] = t;
        }
    }
    return o;
}

/* Run ios[0..n) with QD in flight; ios are freed by the caller. */
static void run_ios(struct io **ios, uint64_t n, int is_write)
{
    now(&last_progress);
    for (uint64_t k = 0; k < n; k++) {
        pump(qd - 1);
        if (is_write)
            submit_write(ios[k]);
        else
            submit_read(ios[k]);
    }
    pump(0);
}

/* ---------------------------------------------------------------- ior */

static void ior_write(uint32_t c, uint32_t clients, uint64_t records, uint32_t recsize)
{
    uint64_t *o = order(records, c);
    struct io **ios = calloc(records, sizeof(*ios));
    uint8_t *bufs = malloc(records * (uint64_t)recsize);
    int st = stable_for(c);
    for (uint64_t k = 0; k < records; k++) {
        struct io *io = ios[k] = calloc(1, sizeof(*io));
        uint64_t i = o[k];
        io->client = c;
        io->rec = i;
        io->rec_start = io->off = (i * clients + c) * (uint64_t)recsize;
        io->len = recsize;
        io->stable = st;
        io->buf = bufs + k * (uint64_t)recsize;
        fill(io->buf, c, i, 0, recsize);
    }
    run_ios(ios, records, 1);
    if (st == UNSTABLE)
        commit();
    for (uint64_t k = 0; k < records; k++)
        free(ios[k]);
    free(ios);
    free(bufs);
    free(o);
}

/* Read every record of every client (starting at a different one per reader). */
static uint64_t ior_verify(uint32_t me_c, uint32_t clients, uint64_t records, uint32_t recsize)
{
    uint64_t total = records * clients, bad = 0, bad_records = 0;
    /* Bounded memory: one batch of expected buffers at a time. */
    uint64_t batch = 256;
    struct io **ios = calloc(batch, sizeof(*ios));
    uint8_t *bufs = malloc(batch * (uint64_t)recsize);
    for (uint64_t b0 = 0; b0 < total; b0 += batch) {
        uint64_t nb = total - b0 < batch ? total - b0 : batch;
        for (uint64_t k = 0; k < nb; k++) {
            uint64_t idx = (b0 + k + (uint64_t)me_c * records) % total; /* file record index */
            struct io *io = ios[k] = calloc(1, sizeof(*io));
            io->client = idx % clients;
            io->rec = idx / clients;
            io->rec_start = io->off = idx * (uint64_t)recsize;
            io->len = recsize;
            io->buf = bufs + k * (uint64_t)recsize;
            fill(io->buf, io->client, io->rec, 0, recsize);
        }
        run_ios(ios, nb, 0);
        for (uint64_t k = 0; k < nb; k++) {
            bad += ios[k]->bad_bytes;
            bad_records += ios[k]->reported;
            free(ios[k]);
        }
    }
    free(ios);
    free(bufs);
    printf("client=%u verified_records=%" PRIu64 " bad_records=%" PRIu64 " bad_bytes=%" PRIu64
           "\n", me_c, total, bad_records, bad);
    return bad;
}

/* Racing readers: expected bytes of [off, off+len) of the ior file. */
static void expect_range(uint8_t *dst, uint64_t off, uint32_t len, uint32_t clients,
                         uint32_t recsize)
{
    while (len) {
        uint64_t idx = off / recsize, j = off % recsize;
        uint32_t n = recsize - j < len ? recsize - j : len;
        fill(dst, idx % clients, idx / clients, j, n);
        dst += n;
        off += n;
        len -= n;
    }
}

struct race {
    uint64_t off;
    uint32_t len;
    uint8_t *expect;
    uint32_t clients, recsize;
};
static uint64_t race_reads, race_bytes, race_bad, race_records;

static void race_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    struct race *q = priv;
    READ3res *res = data;
    (void)r;
    inflight--;
    now(&last_progress);
    if (status != RPC_STATUS_SUCCESS)
        die(2, "READ off=%" PRIu64 " len=%u: RPC failed: %s", q->off, q->len,
            data ? (const char *)data : "cancelled");
    race_reads++;
    if (res->status != NFS3_OK) {
        printf("error=racing READ off=%" PRIu64 " len=%u status=%s\n", q->off, q->len,
               nfsstat_name(res->status));
        failures++;
    } else {
        READ3resok *ok = &res->READ3res_u.resok;
        const uint8_t *got = (const uint8_t *)ok->data.data_val;
        uint32_t n = ok->data.data_len < q->len ? ok->data.data_len : q->len;
        uint64_t bad = 0, first = 0, total = (uint64_t)q->clients * race_records * q->recsize;
        race_bytes += n;
        /* Every WRITE ends on a record boundary, so every size the server
         * reports must be a multiple of the record size (a block-rounded size
         * would come from an extending direct write seen half-done), and no
         * data can lie past the last record. */
        if (ok->file_attributes.attributes_follow) {
            uint64_t size = ok->file_attributes.post_op_attr_u.attributes.size;
            if (size % q->recsize || size > total) {
                failures++;
                if (reports++ < MAX_REPORTS)
                    printf("racing_size READ off=%" PRIu64 " len=%u: post-op size %" PRIu64
                           " is no record boundary (records of %u bytes, %" PRIu64 " in all)\n",
                           q->off, q->len, size, q->recsize, total);
            }
        }
        if (q->off + ok->data.data_len > total) {
            failures++;
            if (reports++ < MAX_REPORTS)
                printf("racing_eof READ off=%" PRIu64 " len=%u returned %u bytes: past the "
                       "final size %" PRIu64 "\n", q->off, q->len, ok->data.data_len, total);
        }
        for (uint32_t k = 0; k < n; k++)
            if (got[k] && got[k] != q->expect[k]) {
                if (!bad)
                    first = k;
                bad++;
            }
        if (bad) {
            uint64_t p = q->off + first, idx = p / q->recsize;
            race_bad += bad;
            failures++;
            if (reports++ < MAX_REPORTS)
                printf("racing_mismatch off=%" PRIu64 " len=%u first_bad=%" PRIu64
                       " (client=%" PRIu64 " record=%" PRIu64 ") expected=0x%02x or 0 got=0x%02x"
                       " bad_bytes=%" PRIu64 "\n", q->off, q->len, p, idx % q->clients,
                       idx / q->clients, q->expect[first], got[first], bad);
        }
    }
    free(q->expect);
    free(q);
}

/* Until `stop` reads EOF: QD READs of random ranges in flight. */
static void race_read(int stop, uint32_t k, uint32_t clients, uint64_t records, uint32_t recsize)
{
    uint64_t total = clients * records * (uint64_t)recsize, st = mix64(seed ^ (0xabcdULL + k));
    race_records = records;
    int stopped = 0;
    now(&last_progress);
    while (!stopped) {
        struct pollfd p = {.fd = stop, .events = POLLIN};
        if (poll(&p, 1, 0) > 0)
            stopped = 1; /* one more round after the writers are done */
        while (inflight < qd) {
            struct race *q = calloc(1, sizeof(*q));
            READ3args a;
            q->off = (st = mix64(st)) % total;
            q->len = 1 + (st = mix64(st)) % (2 * recsize);
            if (q->off + q->len > total)
                q->len = total - q->off;
            q->clients = clients;
            q->recsize = recsize;
            q->expect = malloc(q->len);
            expect_range(q->expect, q->off, q->len, clients, recsize);
            memset(&a, 0, sizeof(a));
            a.file = as_fh3(&file);
            a.offset = q->off;
            a.count = q->len;
            if (rpc_nfs3_read_async(rpc, race_cb, &a, q) != 0)
                die(2, "READ: %s", rpc_get_error(rpc));
            inflight++;
        }
        pump(qd - 1);
    }
    pump(0);
    printf("reader=%u racing_reads=%" PRIu64 " bytes=%" PRIu64 " bad_bytes=%" PRIu64 "\n", k,
           race_reads, race_bytes, race_bad);
}

static pid_t *kids;
static uint32_t nkids;

static void kill_kids(void)
{
    for (uint32_t k = 0; k < nkids; k++)
        if (kids[k] > 0)
            kill(kids[k], SIGKILL);
}

/* Parent: read n tokens from fd, failing if a child dies first. */
static void wait_tokens(int fd, uint32_t n, const char *what)
{
    uint32_t got = 0;
    while (got < n) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, 200);
        if (r > 0) {
            char b[64];
            ssize_t m = read(fd, b, sizeof(b) < n - got ? sizeof(b) : n - got);
            if (m > 0)
                got += m;
        }
        for (uint32_t k = 0; k < nkids; k++) {
            int st;
            if (kids[k] > 0 && waitpid(kids[k], &st, WNOHANG) == kids[k]) {
                kids[k] = -1;
                if (got < n) {
                    kill_kids();
                    die(2, "client %u exited (status 0x%x) before %s", k, st, what);
                }
            }
        }
    }
}

static int cmd_ior(const char *path, uint32_t clients, uint64_t records, uint32_t recsize)
{
    int ready[2], go_write[2], written[2], go_read[2], stop[2];
    uint64_t expect = (uint64_t)clients * records * recsize;
    int rc = 0;
    struct timespec t0;
    long write_ms;

    size_quantum = recsize;
    /* Create the file once, before the clients start. */
    open_file(path, 1);
    rpc_destroy_context(rpc);
    rpc = NULL;

    if (pipe(ready) || pipe(go_write) || pipe(written) || pipe(go_read) || pipe(stop))
        die(2, "pipe: %s", strerror(errno));
    kids = calloc(clients + nreaders, sizeof(*kids));
    nkids = clients + nreaders;
    fflush(stdout);
    for (uint32_t k = 0; k < nreaders; k++) {
        pid_t p = fork();
        if (p < 0) {
            kill_kids();
            die(2, "fork: %s", strerror(errno));
        }
        if (p == 0) {
            char tok = 'x';
            me = clients + k;
            close(go_write[1]);
            close(go_read[1]);
            close(stop[1]);
            close(ready[0]);
            close(written[0]);
            open_file(path, 0);
            if (write(ready[1], &tok, 1) != 1 || read(go_write[0], &tok, 1) != 0)
                die(2, "barrier");
            race_read(stop[0], k, clients, records, recsize);
            fflush(stdout);
            _exit(failures ? 1 : 0);
        }
        kids[clients + k] = p;
    }
    for (uint32_t c = 0; c < clients; c++) {
        pid_t p = fork();
        if (p < 0) {
            kill_kids();
            die(2, "fork: %s", strerror(errno));
        }
        if (p == 0) {
            char tok = 'x';
            me = c;
            close(go_write[1]);
            close(go_read[1]);
            close(stop[1]);
            close(ready[0]);
            close(written[0]);
            open_file(path, 0);
            if (write(ready[1], &tok, 1) != 1 || read(go_write[0], &tok, 1) != 0)
                die(2, "barrier");
            ior_write(c, clients, records, recsize);
            if (write(written[1], &tok, 1) != 1 || read(go_read[0], &tok, 1) != 0)
                die(2, "barrier");
            if (ior_verify(c, clients, records, recsize))
                failures++;
            {
                uint64_t size = getattr_size();
                if (size != expect) {
                    printf("error=client %u: size %" PRIu64 " after all writes, expected %" PRIu64
                           "\n", c, size, expect);
                    failures++;
                }
            }
            if (short_writes || short_reads)
                printf("client=%u short_writes=%d short_reads=%d\n", c, short_writes,
                       short_reads);
            fflush(stdout);
            _exit(failures ? 1 : 0);
        }
        kids[c] = p;
    }
    close(ready[1]);
    close(written[1]);
    close(go_write[0]);
    close(go_read[0]);
    close(stop[0]);
    wait_tokens(ready[0], clients + nreaders, "connecting");
    now(&t0);
    close(go_write[1]); /* all clients start writing (and the racing readers reading) */
    wait_tokens(written[0], clients, "finishing the writes");
    write_ms = ms_since(&t0);
    close(stop[1]); /* racing readers: finish */
    now(&t0);
    close(go_read[1]); /* all clients start reading */
    for (uint32_t k = 0; k < clients + nreaders; k++) {
        int st;
        if (kids[k] <= 0)
            continue; /* reaped in wait_tokens: must have exited 0 after its token */
        if (waitpid(kids[k], &st, 0) == kids[k] && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            printf("error=client %u exited with status 0x%x\n", k, st);
            rc = 1;
        }
        kids[k] = -1;
    }
    printf("bytes=%" PRIu64 " write_ms=%ld read_ms=%ld\n", expect, write_ms, ms_since(&t0));
    printf("result=%s\n", rc ? "fail" : "ok");
    return rc;
}

/* ---------------------------------------------------------------- stream */

static int cmd_stream(const char *path, uint64_t size, const char *what)
{
    uint64_t n = (size + xfer - 1) / xfer, batch = 64;
    uint64_t first = n * part / parts, last = n * (part + 1) / parts;
    struct io **ios = calloc(batch, sizeof(*ios));
    uint8_t *bufs = malloc(batch * (uint64_t)xfer);
    struct timespec t0;
    int do_write = strcmp(what, "read") != 0, do_read = strcmp(what, "write") != 0;
    open_file(path, do_write);
    for (int phase = 0; phase < 2; phase++) {
        uint64_t bad = 0;
        if ((phase == 0 && !do_write) || (phase == 1 && !do_read))
            continue;
        now(&t0);
        uint64_t from = phase ? first : 0, to = phase ? last : n;
        for (uint64_t b0 = from; b0 < to; b0 += batch) {
            uint64_t nb = to - b0 < batch ? to - b0 : batch;
            for (uint64_t k = 0; k < nb; k++) {
                struct io *io = ios[k] = calloc(1, sizeof(*io));
                uint64_t i = b0 + k;
                io->client = 0xffffffffu;
                io->rec = i;
                io->rec_start = io->off = i * xfer;
                io->len = size - io->off < xfer ? size - io->off : xfer;
                io->stable = UNSTABLE;
                io->buf = bufs + k * (uint64_t)xfer;
                fill(io->buf, io->client, i, 0, io->len);
            }
            run_ios(ios, nb, phase == 0);
            for (uint64_t k = 0; k < nb; k++) {
                bad += ios[k]->bad_bytes;
                free(ios[k]);
            }
        }
        if (phase == 0)
            commit();
        printf("%s_ms=%ld\n", phase ? "read" : "write", ms_since(&t0));
        if (phase == 1) {
            uint64_t s = getattr_size();
            printf("bad_bytes=%" PRIu64 "\nsize=%" PRIu64 "\n", bad, s);
            if (s != size) {
                printf("error=size %" PRIu64 " expected %" PRIu64 "\n", s, size);
                failures++;
            }
        }
    }
    printf("result=%s\n", failures ? "fail" : "ok");
    return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- readraw */

struct raw {
    int status;
    uint32_t count, eof, n;
    uint8_t *data;
};

static void raw_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    struct raw *w = priv;
    READ3res *res = data;
    (void)r;
    inflight--;
    now(&last_progress);
    if (status != RPC_STATUS_SUCCESS)
        die(2, "READ: RPC failed: %s", data ? (const char *)data : "cancelled");
    w->status = res->status;
    if (res->status == NFS3_OK) {
        READ3resok *ok = &res->READ3res_u.resok;
        w->count = ok->count;
        w->eof = ok->eof;
        w->n = ok->data.data_len;
        w->data = malloc(w->n + 1);
        memcpy(w->data, ok->data.data_val, w->n);
    }
}

static int cmd_readraw(const char *path, int argc, char **argv)
{
    open_file(path, 0);
    for (int k = 0; k + 1 < argc; k += 2) {
        struct raw w = {0};
        READ3args a;
        memset(&a, 0, sizeof(a));
        a.file = as_fh3(&file);
        a.offset = strtoull(argv[k], NULL, 0);
        a.count = (uint32_t)strtoul(argv[k + 1], NULL, 0);
        if (rpc_nfs3_read_async(rpc, raw_cb, &a, &w) != 0)
            die(2, "READ: %s", rpc_get_error(rpc));
        inflight++;
        now(&last_progress);
        pump(0);
        fprintf(stderr, "status=%s count=%u eof=%u data_len=%u\n", nfsstat_name(w.status),
                w.count, w.eof, w.n);
        if (w.n && fwrite(w.data, 1, w.n, stdout) != w.n)
            die(2, "stdout: %s", strerror(errno));
        free(w.data);
    }
    fflush(stdout);
    return 0;
}

/* ---------------------------------------------------------------- readloop */

struct loopstat {
    uint64_t reads, zero_noeof, short_noeof, eof_early;
    int status;
};

static void loop_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    struct loopstat *ls = priv;
    READ3res *res = data;
    (void)r;
    inflight--;
    now(&last_progress);
    if (status != RPC_STATUS_SUCCESS)
        die(2, "READ: RPC failed: %s", data ? (const char *)data : "cancelled");
    ls->status = res->status;
    ls->reads++;
    if (res->status == NFS3_OK) {
        READ3resok *ok = &res->READ3res_u.resok;
        uint64_t size = ok->file_attributes.attributes_follow
                            ? ok->file_attributes.post_op_attr_u.attributes.size
                            : UINT64_MAX;
        if (ok->count == 0 && !ok->eof) {
            if (ls->zero_noeof++ < MAX_REPORTS)
                printf("zero_without_eof count=0 eof=0 post_op_size=%" PRIu64 "\n", size);
        } else if (ok->count < xfer && !ok->eof) {
            if (ls->short_noeof++ < MAX_REPORTS)
                printf("short_without_eof count=%u eof=0 post_op_size=%" PRIu64 "\n", ok->count,
                       size);
        }
    }
}

/* READ OFF LEN (-x) back to back for SECONDS; report replies with count 0
 * and eof unset (a Linux client turns those into EIO). */
static int cmd_readloop(const char *path, uint64_t off, double seconds)
{
    struct loopstat ls = {0};
    struct timespec t0;
    open_file(path, 0);
    now(&t0);
    while (ms_since(&t0) < seconds * 1000) {
        READ3args a;
        memset(&a, 0, sizeof(a));
        a.file = as_fh3(&file);
        a.offset = off;
        a.count = xfer;
        if (rpc_nfs3_read_async(rpc, loop_cb, &a, &ls) != 0)
            die(2, "READ: %s", rpc_get_error(rpc));
        inflight++;
        pump(qd - 1);
    }
    pump(0);
    printf("reads=%" PRIu64 " zero_without_eof=%" PRIu64 " short_without_eof=%" PRIu64 "\n",
           ls.reads, ls.zero_noeof, ls.short_noeof);
    printf("result=%s\n", ls.zero_noeof ? "fail" : "ok");
    return ls.zero_noeof ? 1 : 0;
}

/* ---------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr,
            "usage: iorhard [-u UID] [-g GID] [-p NFSPORT] [-m MOUNTPORT] [-q QD] [-s SEED]\n"
            "               [-S unstable|data_sync|file_sync|mixed] [-o up|down|shuffle] [-x XFER]\n"
            "               [-r READERS] [-P K/N (stream: read part K of N)]\n"
            "               SERVER EXPORT CMD [ARGS]\n"
            "  ior FILE CLIENTS RECORDS RECSIZE | stream FILE SIZE write|read|both\n"
            "  readraw FILE OFF LEN [OFF LEN]... | readloop FILE OFF SECONDS (LEN = -x)\n"
            "or:    iorhard [-s SEED] pattern CLIENTS RECORDS RECSIZE\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int opt;
    const char *cmd;
    while ((opt = getopt(argc, argv, "+u:g:p:m:q:s:S:o:x:r:P:")) != -1) {
        switch (opt) {
        case 'u': uid = atoi(optarg); break;
        case 'g': gid = atoi(optarg); break;
        case 'p': nfs_port = atoi(optarg); break;
        case 'm': mount_port = atoi(optarg); break;
        case 'q': qd = atoi(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 0); break;
        case 'S': stable_opt = optarg; break;
        case 'o': order_opt = optarg; break;
        case 'x': xfer = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'r': nreaders = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'P':
            if (sscanf(optarg, "%u/%u", &part, &parts) != 2 || parts == 0 || part >= parts)
                usage();
            break;
        default: usage();
        }
    }
    if (qd < 1 || !xfer)
        usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    argv += optind;
    argc -= optind;
    if (argc >= 4 && !strcmp(argv[0], "pattern")) {
        uint32_t clients = strtoul(argv[1], NULL, 0), recsize = strtoul(argv[3], NULL, 0);
        uint64_t records = strtoull(argv[2], NULL, 0);
        uint8_t *b = malloc(recsize + 1);
        setvbuf(stdout, NULL, _IOFBF, 1 << 20);
        for (uint64_t i = 0; i < records; i++)
            for (uint32_t c = 0; c < clients; c++) {
                fill(b, c, i, 0, recsize);
                if (fwrite(b, 1, recsize, stdout) != recsize)
                    die(2, "stdout: %s", strerror(errno));
            }
        fflush(stdout);
        return 0;
    }
    if (argc < 4)
        usage();
    server = argv[0];
    export_path = argv[1];
    cmd = argv[2];
    if (!strcmp(cmd, "ior") && argc == 7)
        return cmd_ior(argv[3], strtoul(argv[4], NULL, 0), strtoull(argv[5], NULL, 0),
                       strtoul(argv[6], NULL, 0));
    if (!strcmp(cmd, "stream") && argc == 6)
        return cmd_stream(argv[3], strtoull(argv[4], NULL, 0), argv[5]);
    if (!strcmp(cmd, "readloop") && argc == 6)
        return cmd_readloop(argv[3], strtoull(argv[4], NULL, 0), atof(argv[5]));
    if (!strcmp(cmd, "readraw") && argc >= 6)
        return cmd_readraw(argv[3], argc - 4, argv + 4);
    usage();
    return 2;
}

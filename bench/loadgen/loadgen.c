/*
 * loadgen: NFSv3 and NFSv4.0 load generator for the dionfs benchmark suite.
 *
 * The protocol is libnfs's (an independent NFS client library); the load
 * shape is ours. One thread per connection, each with its own nfs_context
 * and its own poll loop, keeping up to --qd requests in flight through
 * nfs_pread_async / nfs_pwrite_async.
 *
 * --vers 3 (the default) or 4: libnfs's NFSv4 is minor version 0 (RFC 7530;
 * SETCLIENTID, OPEN_CONFIRM, every call a COMPOUND of PUTFH and the op).
 * Over v4 there is no MOUNT protocol and no portmapper: libnfs connects to
 * the URL's nfsport (2049 without one), mountport is ignored, and the
 * export is looked up from PUTROOTFH. Each connection is its own NFSv4
 * client with its own client name, which is also its open-owner (libnfs's
 * default name is the same for every context of a process within a
 * second: with it, connections after the first took over the first's
 * client, and Ganesha answered NFS4ERR_EXPIRED or NFS4ERR_CLID_INUSE).
 * Differences from v3, libnfs's (4.0's and 5.0's but the first):
 *  - libnfs before 5.0 encodes a COMPOUND into a buffer of 4 KiB, so a
 *    WRITE of 4 KiB cannot be sent (3,900 bytes could, to Ganesha): with
 *    such a libnfs, --vers 4 refuses a --bs above V4_WRITE_MAX for
 *    --op write and create, and --help says so (bench/run reads it);
 *  - requests are not split at the server's maximum transfer size, which
 *    libnfs does not learn over v4 (readmax and writemax print 0): a --bs
 *    above it is the server's to shorten (counted in short_io) or refuse;
 *  - --create opens an existing file with O_TRUNC and creates it only if
 *    it is missing, because libnfs makes every OPEN with O_CREAT an
 *    EXCLUSIVE4 create, which fails on an existing file;
 *  - close does not COMMIT, so --op create calls COMMIT before CLOSE
 *    itself (what the kernel's v4 client sends on close);
 *  - every OPEN and CLOSE of a connection carries its open-owner's one
 *    seqid, which libnfs does not serialize, so --op create (an OPEN and
 *    a CLOSE per file) needs --qd 1. rename and remove take no seqid.
 *
 * Every byte written carries a deterministic pattern that depends on its
 * absolute file offset and a seed (so a record written at the wrong place,
 * a stale record, or a torn record is caught); with --verify every byte
 * read back is compared with it and mismatches are counted and reported.
 *
 * Metadata ops (--op create|rename|remove): each connection works on its
 * own --files small files named FILE-c<conn>-<i> in one directory (all
 * connections share it), up to --qd at a time: create makes FILE...tmp
 * (CREATE GUARDED), writes --bs bytes of the pattern (UNSTABLE) and closes
 * it (COMMIT), the way `cp` through a kernel client does; rename renames
 * each .tmp to its final name (the atomic-replace idiom); remove unlinks
 * the final names. One op is one file; its latency is from the first call
 * to the last reply. rename --verify reads every file back afterwards,
 * outside the timed region.
 *
 * SIGUSR1 ends the run early, like --runtime running out: no more calls are
 * sent, those in flight complete and the result covers what was done (the
 * many-clients job stops its random readers when its sequential ones have
 * read their parts of the file, so both are measured over the same time).
 *
 * Result: one JSON object on stdout. Exit status: 0 clean, 1 fatal (setup or
 * connection failure; JSON may still be printed with "fatal"), 3 the run
 * completed but saw I/O errors or data mismatches.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <nfsc/libnfs.h>

/* ------------------------------------------------------------------ */
/* configuration                                                       */

/* The largest WRITE sent over NFSv4 (0: any). libnfs before 5.0 (which
 * added LIBNFS_FEATURE_UMOUNT) encodes a v4 COMPOUND into 4 KiB, which the
 * RPC header, the AUTH_SYS credential (up to ~350 bytes), PUTFH (up to
 * 136) and WRITE's own fields share with the data; 5.0 sizes the buffer
 * for the data (libnfs commit 483be17). */
#ifdef LIBNFS_FEATURE_UMOUNT
#define V4_WRITE_MAX 0
#else
#define V4_WRITE_MAX 3072
#endif

enum pat { P_SEQ, P_RAND, P_STRIDED, P_FIXED };
enum op { O_READ, O_WRITE, O_CREATE, O_RENAME, O_REMOVE };

static struct {
	const char *url;
	const char *file;
	enum op op;
	enum pat pat;
	uint64_t bs;
	uint64_t file_size;   /* seq/rand: range; strided: derived */
	uint64_t records;     /* strided: records per connection */
	uint64_t offset;      /* fixed: offset of every op */
	int qd;
	int conns;
	int shift;            /* strided read: conn c reads records of (c+shift)%N */
	double runtime;       /* seconds; 0 = until the op count runs out */
	uint64_t ops;         /* per connection; 0 = no limit (seq/strided: until range done) */
	uint64_t files;       /* metadata ops: files per connection */
	uint64_t seed;
	int verify;
	int create;           /* create (and truncate) the file first */
	int commit;           /* COMMIT (nfs_fsync) after writes, inside the timed region */
	double timeout;       /* hard limit for the whole run */
	const char *label;
	int vers;             /* NFS version: 3 or 4 (4.0); libnfs's NFS_V3, NFS_V4 */
} cfg = {
	.bs = 1 << 20, .qd = 1, .conns = 1, .seed = 1, .timeout = 600, .label = "", .vers = 3,
};

/* ------------------------------------------------------------------ */
/* time, pattern                                                       */

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The 8-byte word at absolute file offset o (o % 8 == 0) under seed s. */
static inline uint64_t pat_word(uint64_t o, uint64_t s)
{
	uint64_t v = ((o >> 3) + 1) * 0x9E3779B97F4A7C15ull ^ (s * 0xD6E8FEB86659FD93ull);
	v ^= v >> 31;
	return v ^ (o << 16);
}

static inline uint8_t pat_byte(uint64_t o, uint64_t s)
{
	return (uint8_t)(pat_word(o & ~7ull, s) >> (8 * (o & 7)));
}

static void pat_fill(uint8_t *buf, uint64_t off, uint64_t len, uint64_t s)
{
	uint64_t i = 0;
	/* byte-wise up to the first 8-aligned file offset, then whole words
	 * (memcpy: the buffer itself need not be aligned) */
	for (; i < len && ((off + i) & 7); i++)
		buf[i] = pat_byte(off + i, s);
	for (; i + 8 <= len; i += 8) {
		uint64_t w = pat_word(off + i, s);
		memcpy(buf + i, &w, 8);
	}
	for (; i < len; i++)
		buf[i] = pat_byte(off + i, s);
}

/* Number of bytes in buf that differ from the pattern. */
static uint64_t pat_check(const uint8_t *buf, uint64_t off, uint64_t len, uint64_t s,
                          uint64_t *first_bad)
{
	uint64_t bad = 0, i = 0;
	*first_bad = UINT64_MAX;
#define BADBYTE(j)                                                   \
	do {                                                         \
		if (buf[j] != pat_byte(off + (j), s)) {              \
			if (*first_bad == UINT64_MAX)                \
				*first_bad = off + (j);              \
			bad++;                                       \
		}                                                    \
	} while (0)
	for (; i < len && ((off + i) & 7); i++)
		BADBYTE(i);
	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, buf + i, 8);
		if (__builtin_expect(w != pat_word(off + i, s), 0))
			for (uint64_t b = i; b < i + 8; b++)
				BADBYTE(b);
	}
	for (; i < len; i++)
		BADBYTE(i);
#undef BADBYTE
	return bad;
}

/* ------------------------------------------------------------------ */
/* latency histogram: log-linear, 64 sub-buckets per power of two      */

#define NB 3840
static inline int hidx(uint64_t v)
{
	if (v < 128)
		return (int)v;
	int msb = 63 - __builtin_clzll(v);
	int shift = msb - 6;
	return (shift + 1) * 64 + (int)((v >> shift) - 64);
}
static inline double hval(int i)
{
	if (i < 128)
		return i;
	int shift = i / 64 - 1;
	uint64_t sub = (uint64_t)(i % 64 + 64);
	return (double)(sub << shift) + (double)((1ull << shift) - 1) / 2.0;
}

/* ------------------------------------------------------------------ */

#define MAX_BAD_REPORT 8

struct conn;
struct slot {
	struct conn *c;
	uint64_t off;
	uint64_t seed;
	uint64_t t0;
	uint8_t *buf;
	int busy;
	uint64_t file;        /* metadata ops: the file's index */
	struct nfsfh *fh;     /* create: the file being written */
};

struct conn {
	int id;
	pthread_t th;
	struct nfs_context *nfs;
	struct nfsfh *fh;
	struct slot *slots;
	int inflight;
	uint64_t next_i;      /* op index within this connection */
	uint64_t rng;
	uint64_t deadline;
	int stop_issuing;
	int fatal;
	char err[512];
	/* results */
	uint64_t ops, bytes, errors, short_io;
	uint64_t mism_bytes, mism_ops;
	uint64_t verified;
	uint64_t lat_sum, lat_max;
	uint64_t hist[NB];
	uint64_t bad_off[MAX_BAD_REPORT];
	int nbad;
	uint64_t last_seed;   /* fixed writes: seed of the last completed op */
	uint64_t readmax, writemax;
};

static struct conn *conns;
static pthread_barrier_t barrier;
static volatile int abort_all;

static void cerr(struct conn *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (!c->err[0])
		vsnprintf(c->err, sizeof c->err, fmt, ap);
	va_end(ap);
}

static inline uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Pick the next op of this connection. Returns 0 when there is none. */
static int next_op(struct conn *c, uint64_t *off, uint64_t *seed)
{
	uint64_t i = c->next_i;
	uint64_t N = (uint64_t)cfg.conns;
	if (cfg.ops && i >= cfg.ops)
		return 0;
	*seed = cfg.seed;
	switch (cfg.pat) {
	case P_SEQ: {
		uint64_t per = cfg.file_size / N / cfg.bs * cfg.bs;
		uint64_t start = per * (uint64_t)c->id;
		if (c->id == cfg.conns - 1)
			per = cfg.file_size - start; /* the last one takes the tail */
		if (i * cfg.bs >= per)
			return 0;
		*off = start + i * cfg.bs;
		break;
	}
	case P_RAND: {
		uint64_t nblk = cfg.file_size / cfg.bs;
		*off = (xorshift(&c->rng) % nblk) * cfg.bs;
		break;
	}
	case P_STRIDED: {
		uint64_t owner = ((uint64_t)c->id + (uint64_t)cfg.shift) % N;
		if (i >= cfg.records)
			return 0;
		*off = (i * N + owner) * cfg.bs;
		break;
	}
	case P_FIXED:
		*off = cfg.offset;
		*seed = cfg.seed + i + 1000003ull * (uint64_t)c->id;
		break;
	}
	c->next_i++;
	return 1;
}

static void record(struct conn *c, struct slot *s)
{
	uint64_t lat = now_ns() - s->t0;
	c->ops++;
	c->lat_sum += lat;
	if (lat > c->lat_max)
		c->lat_max = lat;
	c->hist[hidx(lat)]++;
	s->busy = 0;
	c->inflight--;
}

static void note_bad(struct conn *c, uint64_t off)
{
	if (c->nbad < MAX_BAD_REPORT)
		c->bad_off[c->nbad++] = off;
}

static void read_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
	struct slot *s = priv;
	struct conn *c = s->c;
	(void)nfs;
	if (err < 0) {
		c->errors++;
		cerr(c, "READ at %" PRIu64 ": %s", s->off, data ? (char *)data : "?");
	} else {
		if ((uint64_t)err != cfg.bs) {
			c->short_io++;
			cerr(c, "short READ at %" PRIu64 ": %d of %" PRIu64, s->off, err, cfg.bs);
		}
		c->bytes += (uint64_t)err;
		if (cfg.verify) {
			uint64_t fb;
			uint64_t bad = pat_check(data, s->off, (uint64_t)err, s->seed, &fb);
			c->verified += (uint64_t)err;
			if ((uint64_t)err != cfg.bs) {
				/* missing bytes are wrong bytes */
				bad += cfg.bs - (uint64_t)err;
				if (fb == UINT64_MAX)
					fb = s->off + (uint64_t)err;
			}
			if (bad) {
				c->mism_bytes += bad;
				c->mism_ops++;
				note_bad(c, fb);
			}
		}
	}
	record(c, s);
}

static void write_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
	struct slot *s = priv;
	struct conn *c = s->c;
	(void)nfs;
	if (err < 0) {
		c->errors++;
		cerr(c, "WRITE at %" PRIu64 ": %s", s->off, data ? (char *)data : "?");
	} else {
		if ((uint64_t)err != cfg.bs) {
			c->short_io++;
			cerr(c, "short WRITE at %" PRIu64 ": %d of %" PRIu64, s->off, err, cfg.bs);
		}
		c->bytes += (uint64_t)err;
		c->last_seed = s->seed;
	}
	record(c, s);
}

/* Set by SIGUSR1: stop sending calls (see the top of the file). */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static int issue(struct conn *c, struct slot *s)
{
	uint64_t off = 0, seed = 0;
	if (c->stop_issuing)
		return 0;
	if (stop_requested || (cfg.runtime > 0 && now_ns() >= c->deadline)) {
		c->stop_issuing = 1;
		return 0;
	}
	if (!next_op(c, &off, &seed)) {
		c->stop_issuing = 1;
		return 0;
	}
	s->off = off;
	s->seed = seed;
	s->busy = 1;
	int rc;
	if (cfg.op == O_WRITE) {
		/* always the pattern: what is written can be verified later */
		pat_fill(s->buf, off, cfg.bs, seed);
		s->t0 = now_ns();
		rc = nfs_pwrite_async(c->nfs, c->fh, off, cfg.bs, s->buf, write_cb, s);
	} else {
		s->t0 = now_ns();
		rc = nfs_pread_async(c->nfs, c->fh, off, cfg.bs, read_cb, s);
	}
	if (rc != 0) {
		s->busy = 0;
		c->fatal = 1;
		cerr(c, "queueing %s failed: %s", cfg.op == O_WRITE ? "WRITE" : "READ",
		     nfs_get_error(c->nfs));
		c->stop_issuing = 1;
		return 0;
	}
	c->inflight++;
	return 1;
}

/* ------------------------------------------------------------------ */
/* metadata ops: create (+ write + commit), rename, remove of small files */

static inline int is_meta(void)
{
	return cfg.op == O_CREATE || cfg.op == O_RENAME || cfg.op == O_REMOVE;
}

/* The pattern seed of file i of connection c: a file swapped with another
 * (or holding stale data) is caught. */
static inline uint64_t file_seed(int c, uint64_t i)
{
	return cfg.seed + 1 + i + 1000003ull * (uint64_t)c;
}

static void file_path(char *out, size_t n, int c, uint64_t i, int tmp)
{
	snprintf(out, n, "%s-c%d-%" PRIu64 "%s", cfg.file, c, i, tmp ? ".tmp" : "");
}

static void meta_fail(struct conn *c, struct slot *s, const char *what, int err, void *data)
{
	c->errors++;
	cerr(c, "%s of file %" PRIu64 " of connection %d: %s (%d)", what, s->file, c->id,
	     data ? (char *)data : "?", err);
	record(c, s);
}

static void meta_close_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
	struct slot *s = priv;
	(void)nfs;
	if (err < 0) {
		meta_fail(s->c, s, "close (COMMIT)", err, data);
		return;
	}
	record(s->c, s);
}

static void meta_close(struct nfs_context *nfs, struct slot *s)
{
	if (nfs_close_async(nfs, s->fh, meta_close_cb, s) != 0)
		meta_fail(s->c, s, "queueing close", -1, (void *)nfs_get_error(nfs));
	s->fh = NULL;
}

/* v4: the COMMIT that libnfs's v3 close makes itself, then the CLOSE */
static void meta_commit_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
	struct slot *s = priv;
	if (err < 0) {
		s->c->errors++;
		cerr(s->c, "COMMIT of file %" PRIu64 ": %s", s->file, data ? (char *)data : "?");
	}
	meta_close(nfs, s);
}

static void meta_write_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
	struct slot *s = priv;
	struct conn *c = s->c;
	if (err < 0 || (uint64_t)err != cfg.bs) {
		if (err >= 0)
			c->short_io++;
		c->errors += err < 0;
		cerr(c, "WRITE of file %" PRIu64 ": %s", s->file, err < 0 && data ? (char *)data : "short");
	} else {
		c->bytes += (uint64_t)err;
	}
	if (cfg.vers == 4) {
		if (nfs_fsync_async(nfs, s->fh, meta_commit_cb, s) == 0)
			return;
		c->errors++;
		cerr(c, "queueing COMMIT of file %" PRIu64 ": %s", s->file, nfs_get_error(nfs));
	}
	meta_close(nfs, s);
}

static void meta_create_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
	struct slot *s = priv;
	struct conn *c = s->c;
	if (err < 0) {
		meta_fail(c, s, "CREATE", err, data);
		return;
	}
	s->fh = data;
	pat_fill(s->buf, 0, cfg.bs, file_seed(c->id, s->file));
	if (nfs_pwrite_async(nfs, s->fh, 0, cfg.bs, s->buf, meta_write_cb, s) != 0) {
		nfs_close(nfs, s->fh);
		s->fh = NULL;
		meta_fail(c, s, "queueing WRITE", -1, (void *)nfs_get_error(nfs));
	}
}

static void meta_done_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
	struct slot *s = priv;
	(void)nfs;
	if (err < 0) {
		meta_fail(s->c, s, cfg.op == O_RENAME ? "RENAME" : "REMOVE", err, data);
		return;
	}
	record(s->c, s);
}

static int meta_issue(struct conn *c, struct slot *s)
{
	char a[512], b[512];
	int rc;
	if (c->stop_issuing)
		return 0;
	if (stop_requested || c->next_i >= cfg.files) {
		c->stop_issuing = 1;
		return 0;
	}
	s->file = c->next_i++;
	s->busy = 1;
	s->t0 = now_ns();
	switch (cfg.op) {
	case O_CREATE:
		file_path(a, sizeof a, c->id, s->file, 1);
		rc = nfs_create_async(c->nfs, a, O_RDWR | O_CREAT | O_EXCL, 0644, meta_create_cb, s);
		break;
	case O_RENAME:
		file_path(a, sizeof a, c->id, s->file, 1);
		file_path(b, sizeof b, c->id, s->file, 0);
		rc = nfs_rename_async(c->nfs, a, b, meta_done_cb, s);
		break;
	default:
		file_path(a, sizeof a, c->id, s->file, 0);
		rc = nfs_unlink_async(c->nfs, a, meta_done_cb, s);
		break;
	}
	if (rc != 0) {
		s->busy = 0;
		c->fatal = 1;
		cerr(c, "queueing a metadata op failed: %s", nfs_get_error(c->nfs));
		c->stop_issuing = 1;
		return 0;
	}
	c->inflight++;
	return 1;
}

/* rename --verify: every final file holds its own pattern (not timed). */
static void meta_verify(struct conn *c)
{
	uint8_t *buf = malloc(cfg.bs);
	char path[512];
	if (!buf)
		return;
	for (int k = 0; k < cfg.conns; k++) {
		for (uint64_t i = 0; i < cfg.files; i++) {
			struct nfsfh *fh = NULL;
			uint64_t fb, bad;
			int n = -1;
			file_path(path, sizeof path, k, i, 0);
			if (nfs_open(c->nfs, path, O_RDONLY, &fh) == 0) {
				n = nfs_pread(c->nfs, fh, 0, cfg.bs, buf);
				nfs_close(c->nfs, fh);
			}
			if (n < 0) {
				c->errors++;
				cerr(c, "read-back of %s failed: %s", path, nfs_get_error(c->nfs));
				n = 0;
			}
			bad = pat_check(buf, 0, (uint64_t)n, file_seed(k, i), &fb) + (cfg.bs - (uint64_t)n);
			c->verified += (uint64_t)n;
			if (bad) {
				c->mism_bytes += bad;
				c->mism_ops++;
				note_bad(c, i);
			}
		}
	}
	free(buf);
}

static int conn_setup(struct conn *c)
{
	struct nfs_url *u;
	c->nfs = nfs_init_context();
	if (!c->nfs) {
		cerr(c, "nfs_init_context failed");
		return -1;
	}
	u = nfs_parse_url_dir(c->nfs, cfg.url);
	if (!u) {
		cerr(c, "bad url %s: %s", cfg.url, nfs_get_error(c->nfs));
		return -1;
	}
	/* after the URL, whose version= it overrides */
	if (nfs_set_version(c->nfs, cfg.vers) != 0) {
		cerr(c, "NFS version %d: %s", cfg.vers, nfs_get_error(c->nfs));
		nfs_destroy_url(u);
		return -1;
	}
	if (cfg.vers == 4) {
		/* one client, and one open-owner, per connection (top of the file);
		 * the pid tells apart the loadgens running at once */
		char name[128];
		snprintf(name, sizeof name, "bench/loadgen pid %d conn %d", (int)getpid(), c->id);
		nfs4_set_client_name(c->nfs, name);
	}
	if (nfs_mount(c->nfs, u->server, u->path) != 0) {
		cerr(c, "mount %s:%s failed: %s", u->server, u->path, nfs_get_error(c->nfs));
		nfs_destroy_url(u);
		return -1;
	}
	nfs_destroy_url(u);
	c->readmax = nfs_get_readmax(c->nfs);
	c->writemax = nfs_get_writemax(c->nfs);
	return 0;
}

static int conn_open(struct conn *c)
{
	int fl = cfg.op == O_WRITE ? O_RDWR : O_RDONLY;
	if (cfg.create && c->id == 0) {
		fl = O_RDWR | O_CREAT | O_TRUNC;
		if (cfg.vers == 4) {
			/* libnfs's v4 O_CREAT is EXCLUSIVE4 (top of the file) */
			int rc = nfs_open2(c->nfs, cfg.file, O_RDWR | O_TRUNC, 0644, &c->fh);
			if (rc == 0)
				return 0;
			if (rc != -ENOENT) {
				cerr(c, "open %s failed: %s", cfg.file, nfs_get_error(c->nfs));
				return -1;
			}
			fl = O_RDWR | O_CREAT | O_EXCL;
		}
	}
	if (nfs_open2(c->nfs, cfg.file, fl, 0644, &c->fh) != 0) {
		cerr(c, "open %s failed: %s", cfg.file, nfs_get_error(c->nfs));
		return -1;
	}
	return 0;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	int setup_ok = 1;

	if (conn_setup(c) != 0)
		setup_ok = 0;
	/* connection 0 creates the file before anybody opens it */
	if (setup_ok && c->id == 0 && !is_meta() && conn_open(c) != 0)
		setup_ok = 0;
	if (!setup_ok)
		c->fatal = 1;
	pthread_barrier_wait(&barrier);
	if (setup_ok && c->id != 0 && !is_meta() && conn_open(c) != 0) {
		c->fatal = 1;
		setup_ok = 0;
	}
	pthread_barrier_wait(&barrier); /* everybody open; main checks */
	pthread_barrier_wait(&barrier); /* go */
	if (!setup_ok || abort_all)
		return NULL;

	uint64_t start = now_ns();
	c->deadline = start + (uint64_t)(cfg.runtime * 1e9);
	uint64_t hard = start + (uint64_t)(cfg.timeout * 1e9);
	int (*next)(struct conn *, struct slot *) = is_meta() ? meta_issue : issue;
	for (int i = 0; i < cfg.qd; i++)
		if (!next(c, &c->slots[i]))
			break;
	while (c->inflight > 0) {
		struct pollfd pfd = { .fd = nfs_get_fd(c->nfs), .events = nfs_which_events(c->nfs) };
		int n = poll(&pfd, 1, 100);
		if (n < 0 && errno != EINTR) {
			cerr(c, "poll: %s", strerror(errno));
			c->fatal = 1;
			break;
		}
		if (nfs_service(c->nfs, n > 0 ? pfd.revents : 0) < 0) {
			cerr(c, "connection failed: %s", nfs_get_error(c->nfs));
			c->fatal = 1;
			break;
		}
		if (abort_all || now_ns() > hard) {
			cerr(c, "timeout after %.0f s with %d requests in flight", cfg.timeout, c->inflight);
			c->fatal = 1;
			abort_all = 1;
			break;
		}
		/* refill every free slot */
		for (int i = 0; i < cfg.qd && !c->stop_issuing; i++)
			if (!c->slots[i].busy)
				next(c, &c->slots[i]);
	}
	if (!c->fatal && cfg.op == O_WRITE && cfg.commit) {
		if (nfs_fsync(c->nfs, c->fh) != 0) {
			c->errors++;
			cerr(c, "COMMIT failed: %s", nfs_get_error(c->nfs));
		}
	}
	return NULL;
}

/* Fixed-offset writes: read the range back and check it holds the last write. */
static void fixed_verify(struct conn *c)
{
	uint8_t *buf = malloc(cfg.bs);
	if (!buf)
		return;
	int n = nfs_pread(c->nfs, c->fh, cfg.offset, cfg.bs, buf);
	if (n < 0) {
		c->errors++;
		cerr(c, "read-back failed: %s", nfs_get_error(c->nfs));
	} else {
		uint64_t fb;
		uint64_t bad = pat_check(buf, cfg.offset, (uint64_t)n, c->last_seed, &fb);
		if ((uint64_t)n < cfg.bs)
			bad += cfg.bs - (uint64_t)n;
		c->verified += (uint64_t)n;
		if (bad) {
			c->mism_bytes += bad;
			c->mism_ops++;
			note_bad(c, fb == UINT64_MAX ? cfg.offset + (uint64_t)n : fb);
		}
	}
	free(buf);
}

/* ------------------------------------------------------------------ */

static double tv_s(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

static uint64_t parse_size(const char *s)
{
	char *e;
	double v = strtod(s, &e);
	switch (*e) {
	case 'k': case 'K': v *= 1024; break;
	case 'm': case 'M': v *= 1024 * 1024; break;
	case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
	case 0: break;
	default: fprintf(stderr, "bad size %s\n", s); exit(2);
	}
	return (uint64_t)v;
}

static void usage(void)
{
	fprintf(stderr,
	    "usage: loadgen --url nfs://HOST/EXPORT?nfsport=P&mountport=M --file /NAME\n"
	    "   [--vers 3|4] (default 3; 4 is NFSv4.0: nfsport only, default 2049)\n"
	    "   --op read|write --pattern seq|rand|strided|fixed --bs SIZE\n"
	    "   | --op create|rename|remove --files N (per connection) --bs SIZE\n"
	    "   [--file-size SIZE] [--records R] [--offset OFF] [--qd N] [--conns N]\n"
	    "   [--shift K] [--runtime SEC] [--ops N] [--seed S] [--verify] [--create]\n"
	    "   [--commit] [--timeout SEC] [--label TEXT]\n"
	    "   SIGUSR1: send no more calls, finish those in flight, report\n"
	    "   metadata ops: FILE is a name prefix (/dir/prefix); files FILE-c<conn>-<i>[.tmp];\n"
	    "   --vers 4 --op create needs --qd 1\n");
	if (V4_WRITE_MAX)
		fprintf(stderr, "   --vers 4 WRITEs at most %d bytes (libnfs before 5.0)\n", V4_WRITE_MAX);
	exit(2);
}

int main(int argc, char **argv)
{
	struct sigaction stop = { .sa_handler = on_stop_signal, .sa_flags = SA_RESTART };
	sigemptyset(&stop.sa_mask);
	sigaction(SIGUSR1, &stop, NULL);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (usage(), ""))
		if (!strcmp(a, "--url")) cfg.url = ARG();
		else if (!strcmp(a, "--file")) cfg.file = ARG();
		else if (!strcmp(a, "--op")) {
			const char *v = ARG();
			if (!strcmp(v, "read")) cfg.op = O_READ;
			else if (!strcmp(v, "write")) cfg.op = O_WRITE;
			else if (!strcmp(v, "create")) cfg.op = O_CREATE;
			else if (!strcmp(v, "rename")) cfg.op = O_RENAME;
			else if (!strcmp(v, "remove")) cfg.op = O_REMOVE;
			else usage();
		} else if (!strcmp(a, "--pattern")) {
			const char *v = ARG();
			if (!strcmp(v, "seq")) cfg.pat = P_SEQ;
			else if (!strcmp(v, "rand")) cfg.pat = P_RAND;
			else if (!strcmp(v, "strided")) cfg.pat = P_STRIDED;
			else if (!strcmp(v, "fixed")) cfg.pat = P_FIXED;
			else usage();
		} else if (!strcmp(a, "--bs")) cfg.bs = parse_size(ARG());
		else if (!strcmp(a, "--file-size")) cfg.file_size = parse_size(ARG());
		else if (!strcmp(a, "--records")) cfg.records = strtoull(ARG(), NULL, 0);
		else if (!strcmp(a, "--offset")) cfg.offset = parse_size(ARG());
		else if (!strcmp(a, "--qd")) cfg.qd = atoi(ARG());
		else if (!strcmp(a, "--conns")) cfg.conns = atoi(ARG());
		else if (!strcmp(a, "--shift")) cfg.shift = atoi(ARG());
		else if (!strcmp(a, "--runtime")) cfg.runtime = atof(ARG());
		else if (!strcmp(a, "--ops")) cfg.ops = strtoull(ARG(), NULL, 0);
		else if (!strcmp(a, "--files")) cfg.files = strtoull(ARG(), NULL, 0);
		else if (!strcmp(a, "--seed")) cfg.seed = strtoull(ARG(), NULL, 0);
		else if (!strcmp(a, "--verify")) cfg.verify = 1;
		else if (!strcmp(a, "--create")) cfg.create = 1;
		else if (!strcmp(a, "--commit")) cfg.commit = 1;
		else if (!strcmp(a, "--timeout")) cfg.timeout = atof(ARG());
		else if (!strcmp(a, "--label")) cfg.label = ARG();
		else if (!strcmp(a, "--vers")) {
			const char *v = ARG();
			if (!strcmp(v, "3")) cfg.vers = 3;
			else if (!strcmp(v, "4")) cfg.vers = 4;
			else usage();
		} else usage();
	}
	if (!cfg.url || !cfg.file || cfg.bs == 0 || cfg.qd < 1 || cfg.qd > 1024 ||
	    cfg.conns < 1 || cfg.conns > 256)
		usage();
	if (cfg.pat == P_STRIDED) {
		if (!cfg.records)
			usage();
		cfg.file_size = cfg.records * cfg.bs * (uint64_t)cfg.conns;
	}
	if (is_meta() && cfg.files == 0)
		usage();
	if (cfg.vers == 4 && cfg.op == O_CREATE && cfg.qd != 1) {
		fprintf(stderr, "--vers 4 --op create needs --qd 1: libnfs sends every OPEN and CLOSE of a\n"
		                "connection with its open-owner's one seqid (RFC 7530 9.1.7), so two files\n"
		                "in flight would reuse a seqid; use more --conns instead\n");
		exit(2);
	}
	if (cfg.vers == 4 && (cfg.op == O_WRITE || cfg.op == O_CREATE) && V4_WRITE_MAX &&
	    cfg.bs > V4_WRITE_MAX) {
		fprintf(stderr, "--vers 4 WRITEs at most %d bytes: libnfs before 5.0 encodes an NFSv4\n"
		                "COMPOUND into 4 KiB (top of loadgen.c)\n", V4_WRITE_MAX);
		exit(2);
	}
	if (!is_meta() && (cfg.pat == P_SEQ || cfg.pat == P_RAND) && cfg.file_size < cfg.bs)
		usage();
	if (cfg.pat == P_RAND && cfg.runtime <= 0 && cfg.ops == 0)
		usage();
	if (cfg.pat == P_FIXED) {
		if (cfg.ops == 0 && cfg.runtime <= 0)
			usage();
		if (cfg.verify && (cfg.qd != 1 || cfg.conns != 1)) {
			fprintf(stderr, "--pattern fixed --verify needs --qd 1 --conns 1\n");
			exit(2);
		}
	}

	conns = calloc((size_t)cfg.conns, sizeof *conns);
	for (int c = 0; c < cfg.conns; c++) {
		conns[c].id = c;
		conns[c].rng = 0x2545F4914F6CDD1Dull ^ (cfg.seed * 7919 + (uint64_t)c * 104729 + 1);
		conns[c].slots = calloc((size_t)cfg.qd, sizeof(struct slot));
		for (int i = 0; i < cfg.qd; i++) {
			conns[c].slots[i].c = &conns[c];
			if (posix_memalign((void **)&conns[c].slots[i].buf, 4096, cfg.bs)) {
				fprintf(stderr, "out of memory\n");
				return 1;
			}
		}
	}
	pthread_barrier_init(&barrier, NULL, (unsigned)cfg.conns + 1);
	for (int c = 0; c < cfg.conns; c++)
		pthread_create(&conns[c].th, NULL, conn_main, &conns[c]);
	pthread_barrier_wait(&barrier); /* conn 0 created the file */
	pthread_barrier_wait(&barrier); /* all opened */
	for (int c = 0; c < cfg.conns; c++)
		if (conns[c].fatal)
			abort_all = 1;
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	uint64_t t0 = now_ns();
	pthread_barrier_wait(&barrier); /* go */
	for (int c = 0; c < cfg.conns; c++)
		pthread_join(conns[c].th, NULL);
	uint64_t t1 = now_ns();
	getrusage(RUSAGE_SELF, &ru1);

	if (cfg.pat == P_FIXED && cfg.op == O_WRITE && cfg.verify && !conns[0].fatal && conns[0].ops)
		fixed_verify(&conns[0]);
	if (cfg.op == O_RENAME && cfg.verify && !conns[0].fatal)
		meta_verify(&conns[0]);

	/* merge */
	uint64_t ops = 0, bytes = 0, errors = 0, shorts = 0, mb = 0, mo = 0, ver = 0, lsum = 0, lmax = 0;
	static uint64_t hist[NB];
	int fatal = 0;
	const char *err = "";
	for (int c = 0; c < cfg.conns; c++) {
		struct conn *k = &conns[c];
		ops += k->ops; bytes += k->bytes; errors += k->errors; shorts += k->short_io;
		mb += k->mism_bytes; mo += k->mism_ops; ver += k->verified; lsum += k->lat_sum;
		if (k->lat_max > lmax) lmax = k->lat_max;
		for (int i = 0; i < NB; i++) hist[i] += k->hist[i];
		if (k->fatal) fatal = 1;
		if (!err[0] && k->err[0]) err = k->err;
	}
	double pct[3] = { 50, 99, 99.9 }, pv[3] = { 0, 0, 0 };
	for (int p = 0; p < 3; p++) {
		uint64_t want = (uint64_t)((double)ops * pct[p] / 100.0 + 0.999999), acc = 0;
		if (want == 0) want = 1;
		for (int i = 0; i < NB; i++) {
			acc += hist[i];
			if (acc >= want) { pv[p] = hval(i); break; }
		}
	}
	double el = (double)(t1 - t0) / 1e9;
	printf("{\"label\":\"%s\",\"vers\":%d,\"op\":\"%s\",\"pattern\":\"%s\",\"bs\":%" PRIu64
	       ",\"qd\":%d,\"conns\":%d,\"file_size\":%" PRIu64 ",\"seed\":%" PRIu64 ",",
	       cfg.label, cfg.vers, (const char *[]){ "read", "write", "create", "rename", "remove" }[cfg.op],
	       (const char *[]){ "seq", "rand", "strided", "fixed" }[cfg.pat], cfg.bs, cfg.qd,
	       cfg.conns, cfg.file_size, cfg.seed);
	printf("\"elapsed_s\":%.6f,\"ops\":%" PRIu64 ",\"bytes\":%" PRIu64
	       ",\"mib_s\":%.3f,\"iops\":%.1f,", el, ops, bytes,
	       el > 0 ? (double)bytes / 1048576.0 / el : 0, el > 0 ? (double)ops / el : 0);
	printf("\"lat_us\":{\"mean\":%.3f,\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f},",
	       ops ? (double)lsum / (double)ops / 1e3 : 0, pv[0] / 1e3, pv[1] / 1e3, pv[2] / 1e3,
	       (double)lmax / 1e3);
	printf("\"errors\":%" PRIu64 ",\"short_io\":%" PRIu64 ",\"verify\":%s,\"verified_bytes\":%" PRIu64
	       ",\"mismatch_bytes\":%" PRIu64 ",\"mismatch_ops\":%" PRIu64 ",\"first_bad_offsets\":[",
	       errors, shorts, cfg.verify ? "true" : "false", ver, mb, mo);
	int first = 1;
	for (int c = 0; c < cfg.conns; c++)
		for (int i = 0; i < conns[c].nbad; i++) {
			printf("%s%" PRIu64, first ? "" : ",", conns[c].bad_off[i]);
			first = 0;
		}
	printf("],\"readmax\":%" PRIu64 ",\"writemax\":%" PRIu64 ",", conns[0].readmax, conns[0].writemax);
	printf("\"client_cpu_s\":{\"user\":%.3f,\"sys\":%.3f},",
	       tv_s(ru1.ru_utime) - tv_s(ru0.ru_utime), tv_s(ru1.ru_stime) - tv_s(ru0.ru_stime));
	printf("\"fatal\":%s,\"error\":\"", fatal ? "true" : "false");
	for (const char *p = err; *p; p++)
		if (*p == '"' || *p == '\\') printf("\\%c", *p);
		else if ((unsigned char)*p < 0x20) putchar(' ');
		else putchar(*p);
	printf("\"}\n");
	fflush(stdout);

	for (int c = 0; c < cfg.conns; c++) {
		if (conns[c].fh) nfs_close(conns[c].nfs, conns[c].fh);
		if (conns[c].nfs) nfs_destroy_context(conns[c].nfs);
	}
	if (fatal)
		return 1;
	return (errors || shorts || mb) ? 3 : 0;
}

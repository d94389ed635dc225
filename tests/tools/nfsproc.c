/*
 * nfsproc: drive single NFSv3 / MOUNTv3 procedures against a server and print
 * the results as key=value lines, for the integration tests.
 *
 * It exists for what neither nfs-rs nor libnfs's command-line tools expose:
 * MKNOD, PATHCONF, plain READDIR (with a byte limit), READDIRPLUS with chosen
 * dircount/maxcount, CREATE in GUARDED/EXCLUSIVE mode, SETATTR with a ctime
 * guard or with any set of attributes on a symlink or special file itself,
 * an explicit UNSTABLE WRITE + COMMIT, the MOUNT procedures DUMP and
 * UMNT, and calls on a raw (possibly corrupted) file handle.
 *
 * Build: cc -O1 -Wall -o nfsproc nfsproc.c -lnfs      (libnfs-dev)
 *
 * Usage: nfsproc [-u UID] [-g GID] [-p NFSPORT] [-m MOUNTPORT] SERVER EXPORT CMD [ARGS...]
 *   Paths are relative to the export root ("" or "." is the root itself).
 *   Every command first MNTs EXPORT to get the root handle (except null,
 *   export, dump). An NFS status is printed as status=NFS3ERR_... and is not
 *   a failure of this program; exit 2 means a transport/RPC-level failure, 1
 *   a usage error or a failed path lookup (lookup_status= says why).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-mount.h>
#include <nfsc/libnfs-raw-nfs.h>
#include <nfsc/libnfs-raw-portmap.h>

#define CALL_TIMEOUT_MS 30000

struct fh {
    unsigned len;
    char data[NFS3_FHSIZE];
};

typedef void (*handler_fn)(void *res, void *arg);

struct call {
    int done;
    int status;
    handler_fn fn;
    void *arg;
};

static const char *server;
static const char *export_path;
static int nfs_port = 2049, mount_port = 20048;
static int uid = -1, gid = -1;
static struct rpc_context *nfs_rpc, *mnt_rpc;
static struct fh root;

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nfsproc: ");
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
    case 6: return "NFS3ERR_NXIO";
    case 13: return "NFS3ERR_ACCES";
    case 17: return "NFS3ERR_EXIST";
    case 18: return "NFS3ERR_XDEV";
    case 19: return "NFS3ERR_NODEV";
    case 20: return "NFS3ERR_NOTDIR";
    case 21: return "NFS3ERR_ISDIR";
    case 22: return "NFS3ERR_INVAL";
    case 27: return "NFS3ERR_FBIG";
    case 28: return "NFS3ERR_NOSPC";
    case 30: return "NFS3ERR_ROFS";
    case 31: return "NFS3ERR_MLINK";
    case 63: return "NFS3ERR_NAMETOOLONG";
    case 66: return "NFS3ERR_NOTEMPTY";
    case 69: return "NFS3ERR_DQUOT";
    case 70: return "NFS3ERR_STALE";
    case 71: return "NFS3ERR_REMOTE";
    case 10001: return "NFS3ERR_BADHANDLE";
    case 10002: return "NFS3ERR_NOT_SYNC";
    case 10003: return "NFS3ERR_BAD_COOKIE";
    case 10004: return "NFS3ERR_NOTSUPP";
    case 10005: return "NFS3ERR_TOOSMALL";
    case 10006: return "NFS3ERR_SERVERFAULT";
    case 10007: return "NFS3ERR_BADTYPE";
    case 10008: return "NFS3ERR_JUKEBOX";
    }
    return "NFS3ERR_UNKNOWN";
}

static const char *mntstat_name(int s)
{
    switch (s) {
    case 0: return "MNT3_OK";
    case 1: return "MNT3ERR_PERM";
    case 2: return "MNT3ERR_NOENT";
    case 5: return "MNT3ERR_IO";
    case 13: return "MNT3ERR_ACCES";
    case 20: return "MNT3ERR_NOTDIR";
    case 22: return "MNT3ERR_INVAL";
    case 63: return "MNT3ERR_NAMETOOLONG";
    case 10004: return "MNT3ERR_NOTSUPP";
    case 10006: return "MNT3ERR_SERVERFAULT";
    }
    return "MNT3ERR_UNKNOWN";
}

static const char *ftype_name(int t)
{
    static const char *names[] = {"?", "reg", "dir", "blk", "chr", "lnk", "sock", "fifo"};
    return (t >= 1 && t <= 7) ? names[t] : "?";
}

static void print_hex(const char *key, const char *data, unsigned len)
{
    printf("%s=", key);
    for (unsigned i = 0; i < len; i++)
        printf("%02x", (unsigned char)data[i]);
    printf("\n");
}

static void print_fattr(const char *prefix, const fattr3 *a)
{
    printf("%stype=%s\n%smode=%04o\n%snlink=%u\n%suid=%u\n%sgid=%u\n%ssize=%" PRIu64
           "\n%sfileid=%" PRIu64 "\n%srdev=%u,%u\n%sctime=%u.%09u\n%smtime=%u.%09u\n",
           prefix, ftype_name(a->type), prefix, a->mode & 07777, prefix, a->nlink, prefix,
           a->uid, prefix, a->gid, prefix, (uint64_t)a->size, prefix, (uint64_t)a->fileid,
           prefix, a->rdev.specdata1, a->rdev.specdata2, prefix, a->ctime.seconds,
           a->ctime.nseconds, prefix, a->mtime.seconds, a->mtime.nseconds);
}

static void print_post_op(const char *prefix, const post_op_attr *p)
{
    if (p->attributes_follow)
        print_fattr(prefix, &p->post_op_attr_u.attributes);
}

static void generic_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
    struct call *c = priv;
    (void)rpc;
    c->done = 1;
    c->status = status;
    if (status == RPC_STATUS_SUCCESS) {
        if (c->fn)
            c->fn(data, c->arg);
    } else {
        printf("rpc_error=%s\n", status == RPC_STATUS_CANCEL ? "cancelled"
                                 : data ? (const char *)data : "unknown");
    }
}

/* Run the event loop of rpc until c completes; a transport failure is fatal. */
static void wait_call(struct rpc_context *rpc, struct call *c, const char *what)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!c->done) {
        struct pollfd pfd = {.fd = rpc_get_fd(rpc), .events = rpc_which_events(rpc)};
        int n = poll(&pfd, 1, 100);
        if (n < 0 && errno != EINTR)
            die(2, "%s: poll: %s", what, strerror(errno));
        if (rpc_service(rpc, n > 0 ? pfd.revents : 0) < 0 && !c->done)
            die(2, "%s: rpc_service failed: %s", what, rpc_get_error(rpc));
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
            CALL_TIMEOUT_MS)
            die(2, "%s: timed out", what);
    }
    if (c->status != RPC_STATUS_SUCCESS) {
        fflush(stdout);
        die(2, "%s: RPC failed", what);
    }
}

static struct rpc_context *connect_prog(int port, int prog, int vers, const char *what)
{
    struct rpc_context *rpc = rpc_init_context();
    struct call c = {0};
    if (!rpc)
        die(2, "rpc_init_context failed");
    if (uid >= 0)
        rpc_set_uid(rpc, uid);
    if (gid >= 0)
        rpc_set_gid(rpc, gid);
    if (rpc_connect_port_async(rpc, server, port, prog, vers, generic_cb, &c) != 0)
        die(2, "connect %s %s:%d: %s", what, server, port, rpc_get_error(rpc));
    wait_call(rpc, &c, what);
    return rpc;
}

static struct rpc_context *nfs(void)
{
    if (!nfs_rpc)
        nfs_rpc = connect_prog(nfs_port, NFS_PROGRAM, NFS_V3, "connect nfs");
    return nfs_rpc;
}

static struct rpc_context *mnt(void)
{
    if (!mnt_rpc)
        mnt_rpc = connect_prog(mount_port, MOUNT_PROGRAM, MOUNT_V3, "connect mount");
    return mnt_rpc;
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

static int parse_hex_fh(const char *hex, struct fh *out)
{
    size_t n = strlen(hex);
    if (n % 2 || n / 2 > NFS3_FHSIZE)
        return -1;
    out->len = n / 2;
    for (size_t i = 0; i < out->len; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out->data[i] = (char)v;
    }
    return 0;
}

/* ---------------------------------------------------------------- MOUNT */

struct mnt_result {
    int status;
    struct fh fh;
    char flavors[128];
};

static void mnt_handler(void *res, void *arg)
{
    mountres3 *r = res;
    struct mnt_result *m = arg;
    m->status = r->fhs_status;
    if (r->fhs_status == MNT3_OK) {
        fhandle3 *h = &r->mountres3_u.mountinfo.fhandle;
        m->fh.len = h->fhandle3_len > NFS3_FHSIZE ? NFS3_FHSIZE : h->fhandle3_len;
        memcpy(m->fh.data, h->fhandle3_val, m->fh.len);
        m->flavors[0] = 0;
        for (u_int i = 0; i < r->mountres3_u.mountinfo.auth_flavors.auth_flavors_len && i < 8; i++)
            snprintf(m->flavors + strlen(m->flavors), sizeof(m->flavors) - strlen(m->flavors),
                     "%s%d", i ? "," : "", r->mountres3_u.mountinfo.auth_flavors.auth_flavors_val[i]);
    }
}

static int do_mnt(int quiet)
{
    struct mnt_result m = {0};
    struct call c = {.fn = mnt_handler, .arg = &m};
    if (rpc_mount3_mnt_async(mnt(), generic_cb, (char *)export_path, &c) != 0)
        die(2, "MNT: %s", rpc_get_error(mnt()));
    wait_call(mnt(), &c, "MNT");
    if (!quiet || m.status != MNT3_OK)
        printf("mnt_status=%s\n", mntstat_name(m.status));
    if (m.status == MNT3_OK) {
        root = m.fh;
        if (!quiet) {
            print_hex("root_fh", root.data, root.len);
            printf("auth_flavors=%s\n", m.flavors);
        }
    }
    return m.status;
}

static void dump_handler(void *res, void *arg)
{
    mountlist ml = *(mountlist *)res;
    int n = 0;
    (void)arg;
    for (; ml; ml = ml->ml_next, n++)
        printf("mount=%s:%s\n", ml->ml_hostname, ml->ml_directory);
    printf("mounts=%d\n", n);
}

static void export_handler(void *res, void *arg)
{
    exports ex = *(exports *)res;
    int n = 0;
    (void)arg;
    for (; ex; ex = ex->ex_next, n++) {
        printf("export=%s", ex->ex_dir);
        for (groups g = ex->ex_groups; g; g = g->gr_next)
            printf(" %s", g->gr_name);
        printf("\n");
    }
    printf("exports=%d\n", n);
}

static void umnt_handler(void *res, void *arg)
{
    (void)res;
    (void)arg;
    printf("umnt=ok\n");
}

static void mount_simple(const char *what)
{
    struct call c = {0};
    int r;
    if (!strcmp(what, "dump")) {
        c.fn = dump_handler;
        r = rpc_mount3_dump_async(mnt(), generic_cb, &c);
    } else if (!strcmp(what, "export")) {
        c.fn = export_handler;
        r = rpc_mount3_export_async(mnt(), generic_cb, &c);
    } else if (!strcmp(what, "umnt")) {
        c.fn = umnt_handler;
        r = rpc_mount3_umnt_async(mnt(), generic_cb, (char *)export_path, &c);
    } else {
        r = rpc_mount3_null_async(mnt(), generic_cb, &c);
    }
    if (r != 0)
        die(2, "%s: %s", what, rpc_get_error(mnt()));
    wait_call(mnt(), &c, what);
}

/* ---------------------------------------------------------------- LOOKUP */

struct lookup_result {
    int status;
    struct fh fh;
    fattr3 attr;
    int have_attr;
};

static void lookup_handler(void *res, void *arg)
{
    LOOKUP3res *r = res;
    struct lookup_result *l = arg;
    l->status = r->status;
    if (r->status == NFS3_OK) {
        copy_fh(&l->fh, &r->LOOKUP3res_u.resok.object);
        l->have_attr = r->LOOKUP3res_u.resok.obj_attributes.attributes_follow;
        if (l->have_attr)
            l->attr = r->LOOKUP3res_u.resok.obj_attributes.post_op_attr_u.attributes;
    }
}

static int lookup_one(struct fh *dir, const char *name, struct lookup_result *l)
{
    LOOKUP3args a;
    struct call c = {.fn = lookup_handler, .arg = l};
    a.what.dir = as_fh3(dir);
    a.what.name = (char *)name;
    if (rpc_nfs3_lookup_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "LOOKUP: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "LOOKUP");
    return l->status;
}

/* Resolve a path relative to the export root; exits 1 if a component fails. */
static struct fh resolve(const char *path)
{
    struct fh cur = root;
    char *copy = strdup(path), *save = NULL;
    for (char *tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        struct lookup_result l = {0};
        if (!strcmp(tok, "."))
            continue;
        if (lookup_one(&cur, tok, &l) != NFS3_OK) {
            printf("lookup_status=%s\nlookup_name=%s\n", nfsstat_name(l.status), tok);
            exit(1);
        }
        cur = l.fh;
    }
    free(copy);
    return cur;
}

/* ---------------------------------------------------------------- procedures */

static int last_status;

static void getattr_handler(void *res, void *arg)
{
    GETATTR3res *r = res;
    (void)arg;
    last_status = r->status;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK)
        print_fattr("", &r->GETATTR3res_u.resok.obj_attributes);
}

static void getattr_fh(struct fh *f)
{
    GETATTR3args a = {.object = as_fh3(f)};
    struct call c = {.fn = getattr_handler};
    if (rpc_nfs3_getattr_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "GETATTR: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "GETATTR");
}

/* SETATTR with a guard: first with a wrong ctime (expect NOT_SYNC), then with the
 * object's current ctime (expect OK). */
static void setattr_status_handler(void *res, void *arg)
{
    SETATTR3res *r = res;
    *(int *)arg = r->status;
}

static int setattr(struct fh *f, int mode, int64_t size, const nfstime3 *guard)
{
    SETATTR3args a;
    int st = -1;
    struct call c = {.fn = setattr_status_handler, .arg = &st};
    memset(&a, 0, sizeof(a));
    a.object = as_fh3(f);
    if (mode >= 0) {
        a.new_attributes.mode.set_it = 1;
        a.new_attributes.mode.set_mode3_u.mode = mode;
    }
    if (size >= 0) {
        a.new_attributes.size.set_it = 1;
        a.new_attributes.size.set_size3_u.size = size;
    }
    if (guard) {
        a.guard.check = 1;
        a.guard.sattrguard3_u.obj_ctime = *guard;
    }
    if (rpc_nfs3_setattr_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "SETATTR: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "SETATTR");
    return st;
}

static void ctime_handler(void *res, void *arg)
{
    GETATTR3res *r = res;
    if (r->status == NFS3_OK)
        *(nfstime3 *)arg = r->GETATTR3res_u.resok.obj_attributes.ctime;
}

static void cmd_setattr_guard(const char *path, int mode)
{
    struct fh f = resolve(path);
    nfstime3 ctime = {0, 0}, wrong;
    GETATTR3args a = {.object = as_fh3(&f)};
    struct call c = {.fn = ctime_handler, .arg = &ctime};
    if (rpc_nfs3_getattr_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "GETATTR: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "GETATTR");
    wrong = ctime;
    wrong.seconds -= 1000;
    printf("bad_guard_status=%s\n", nfsstat_name(setattr(&f, mode, -1, &wrong)));
    printf("good_guard_status=%s\n", nfsstat_name(setattr(&f, mode, -1, &ctime)));
    getattr_fh(&f);
}

/* SETATTR with any of mode=OCTAL uid=N gid=N atime=SEC mtime=SEC (times at
 * whole seconds, set by the client), on the object PATH names itself: a
 * symlink or a special file is not followed. */
static void cmd_setattr(const char *path, int argc, char **argv)
{
    struct fh f = resolve(path);
    SETATTR3args a;
    int st = -1;
    struct call c = {.fn = setattr_status_handler, .arg = &st};
    memset(&a, 0, sizeof(a));
    a.object = as_fh3(&f);
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq)
            die(1, "setattr: expected KEY=VALUE, got %s", argv[i]);
        unsigned long v = strtoul(eq + 1, NULL, !strncmp(argv[i], "mode=", 5) ? 8 : 0);
        if (!strncmp(argv[i], "mode=", 5)) {
            a.new_attributes.mode.set_it = 1;
            a.new_attributes.mode.set_mode3_u.mode = v;
        } else if (!strncmp(argv[i], "uid=", 4)) {
            a.new_attributes.uid.set_it = 1;
            a.new_attributes.uid.set_uid3_u.uid = v;
        } else if (!strncmp(argv[i], "gid=", 4)) {
            a.new_attributes.gid.set_it = 1;
            a.new_attributes.gid.set_gid3_u.gid = v;
        } else if (!strncmp(argv[i], "atime=", 6)) {
            a.new_attributes.atime.set_it = SET_TO_CLIENT_TIME;
            a.new_attributes.atime.set_atime_u.atime.seconds = v;
        } else if (!strncmp(argv[i], "mtime=", 6)) {
            a.new_attributes.mtime.set_it = SET_TO_CLIENT_TIME;
            a.new_attributes.mtime.set_mtime_u.mtime.seconds = v;
        } else {
            die(1, "setattr: unknown attribute %s", argv[i]);
        }
    }
    if (rpc_nfs3_setattr_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "SETATTR: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "SETATTR");
    printf("status=%s\n", nfsstat_name(st));
}

static void access_handler(void *res, void *arg)
{
    ACCESS3res *r = res;
    (void)arg;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK)
        printf("access=0x%02x\n", r->ACCESS3res_u.resok.access);
}

static void cmd_access(const char *path, unsigned mask)
{
    struct fh f = resolve(path);
    ACCESS3args a = {.object = as_fh3(&f), .access = mask};
    struct call c = {.fn = access_handler};
    if (rpc_nfs3_access_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "ACCESS: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "ACCESS");
}

/* CREATE, MKNOD, MKDIR, SYMLINK share their reply shape. */
static void create_handler(void *res, void *arg)
{
    CREATE3res *r = res;
    (void)arg;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK) {
        if (r->CREATE3res_u.resok.obj.handle_follows) {
            nfs_fh3 *h = &r->CREATE3res_u.resok.obj.post_op_fh3_u.handle;
            print_hex("fh", h->data.data_val, h->data.data_len);
        }
        print_post_op("", &r->CREATE3res_u.resok.obj_attributes);
    }
}

static void cmd_create(const char *how, const char *dirpath, const char *name, const char *verf)
{
    struct fh d = resolve(dirpath);
    CREATE3args a;
    struct call c = {.fn = create_handler};
    memset(&a, 0, sizeof(a));
    a.where.dir = as_fh3(&d);
    a.where.name = (char *)name;
    if (!strcmp(how, "unchecked") || !strcmp(how, "guarded")) {
        a.how.mode = !strcmp(how, "guarded") ? GUARDED : UNCHECKED;
        a.how.createhow3_u.obj_attributes.mode.set_it = 1;
        a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
    } else if (!strcmp(how, "exclusive")) {
        a.how.mode = EXCLUSIVE;
        strncpy(a.how.createhow3_u.verf, verf ? verf : "nfsproc!", NFS3_CREATEVERFSIZE);
    } else {
        die(1, "create: how must be unchecked|guarded|exclusive");
    }
    if (rpc_nfs3_create_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "CREATE: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "CREATE");
}

static void cmd_mknod(const char *type, const char *dirpath, const char *name)
{
    struct fh d = resolve(dirpath);
    MKNOD3args a;
    sattr3 *s;
    struct call c = {.fn = create_handler};
    memset(&a, 0, sizeof(a));
    a.where.dir = as_fh3(&d);
    a.where.name = (char *)name;
    if (!strcmp(type, "fifo")) {
        a.what.type = NF3FIFO;
        s = &a.what.mknoddata3_u.pipe_attributes;
    } else if (!strcmp(type, "sock")) {
        a.what.type = NF3SOCK;
        s = &a.what.mknoddata3_u.sock_attributes;
    } else if (!strcmp(type, "chr") || !strcmp(type, "blk")) {
        devicedata3 *dev = !strcmp(type, "chr") ? &a.what.mknoddata3_u.chr_device
                                                : &a.what.mknoddata3_u.blk_device;
        a.what.type = !strcmp(type, "chr") ? NF3CHR : NF3BLK;
        dev->spec.specdata1 = 1; /* 1,3 = /dev/null */
        dev->spec.specdata2 = 3;
        s = &dev->dev_attributes;
    } else if (!strcmp(type, "reg") || !strcmp(type, "dir") || !strcmp(type, "lnk")) {
        /* Not allowed by RFC 1813 (NFS3ERR_BADTYPE expected). */
        a.what.type = !strcmp(type, "reg") ? NF3REG : !strcmp(type, "dir") ? NF3DIR : NF3LNK;
        s = &a.what.mknoddata3_u.pipe_attributes;
    } else {
        die(1, "mknod: type must be fifo|sock|chr|blk|reg|dir|lnk");
    }
    s->mode.set_it = 1;
    s->mode.set_mode3_u.mode = 0644;
    /* The zdr encoder only looks at the union arm of the type: for reg/dir/lnk
     * it encodes nothing after the type, which is what RFC 1813 says. */
    if (rpc_nfs3_mknod_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "MKNOD: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "MKNOD");
}

static void cmd_mkdir(const char *dirpath, const char *name)
{
    struct fh d = resolve(dirpath);
    MKDIR3args a;
    struct call c = {.fn = create_handler};
    memset(&a, 0, sizeof(a));
    a.where.dir = as_fh3(&d);
    a.where.name = (char *)name;
    a.attributes.mode.set_it = 1;
    a.attributes.mode.set_mode3_u.mode = 0755;
    if (rpc_nfs3_mkdir_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "MKDIR: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "MKDIR");
}

static void cmd_symlink(const char *dirpath, const char *name, const char *target)
{
    struct fh d = resolve(dirpath);
    SYMLINK3args a;
    struct call c = {.fn = create_handler};
    memset(&a, 0, sizeof(a));
    a.where.dir = as_fh3(&d);
    a.where.name = (char *)name;
    a.symlink.symlink_data = (char *)target;
    if (rpc_nfs3_symlink_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "SYMLINK: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "SYMLINK");
}

static void readlink_handler(void *res, void *arg)
{
    READLINK3res *r = res;
    (void)arg;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK)
        printf("target=%s\n", r->READLINK3res_u.resok.data);
}

static void cmd_readlink(const char *path)
{
    struct fh f = resolve(path);
    READLINK3args a = {.symlink = as_fh3(&f)};
    struct call c = {.fn = readlink_handler};
    if (rpc_nfs3_readlink_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "READLINK: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "READLINK");
}

/* REMOVE, RMDIR, RENAME, LINK: print only the status (first field of every res). */
static void status_handler(void *res, void *arg)
{
    (void)arg;
    last_status = *(nfsstat3 *)res;
    printf("status=%s\n", nfsstat_name(last_status));
}

static void cmd_remove(int is_rmdir, const char *dirpath, const char *name)
{
    struct fh d = resolve(dirpath);
    struct call c = {.fn = status_handler};
    int r;
    if (is_rmdir) {
        RMDIR3args a = {.object = {.dir = as_fh3(&d), .name = (char *)name}};
        r = rpc_nfs3_rmdir_async(nfs(), generic_cb, &a, &c);
    } else {
        REMOVE3args a = {.object = {.dir = as_fh3(&d), .name = (char *)name}};
        r = rpc_nfs3_remove_async(nfs(), generic_cb, &a, &c);
    }
    if (r != 0)
        die(2, "REMOVE/RMDIR: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, is_rmdir ? "RMDIR" : "REMOVE");
}

static void cmd_rename(const char *d1, const char *n1, const char *d2, const char *n2)
{
    struct fh f1 = resolve(d1), f2 = resolve(d2);
    RENAME3args a = {.from = {.dir = as_fh3(&f1), .name = (char *)n1},
                     .to = {.dir = as_fh3(&f2), .name = (char *)n2}};
    struct call c = {.fn = status_handler};
    if (rpc_nfs3_rename_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "RENAME: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "RENAME");
}

static void cmd_link(const char *path, const char *dirpath, const char *name)
{
    struct fh f = resolve(path), d = resolve(dirpath);
    LINK3args a = {.file = as_fh3(&f), .link = {.dir = as_fh3(&d), .name = (char *)name}};
    struct call c = {.fn = status_handler};
    if (rpc_nfs3_link_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "LINK: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "LINK");
}

/* READDIR / READDIRPLUS paging. */
struct dir_state {
    int status;
    int eof;
    int entries;
    int with_fh;
    int with_attr;
    int print_names;
    cookie3 cookie;
    char verf[NFS3_COOKIEVERFSIZE];
};

static void readdir_handler(void *res, void *arg)
{
    READDIR3res *r = res;
    struct dir_state *s = arg;
    s->status = r->status;
    if (r->status != NFS3_OK)
        return;
    memcpy(s->verf, r->READDIR3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
    for (entry3 *e = r->READDIR3res_u.resok.reply.entries; e; e = e->nextentry) {
        if (s->print_names)
            printf("entry=%s\n", e->name);
        s->entries++;
        s->cookie = e->cookie;
    }
    s->eof = r->READDIR3res_u.resok.reply.eof;
}

static void readdirplus_handler(void *res, void *arg)
{
    READDIRPLUS3res *r = res;
    struct dir_state *s = arg;
    s->status = r->status;
    if (r->status != NFS3_OK)
        return;
    memcpy(s->verf, r->READDIRPLUS3res_u.resok.cookieverf, NFS3_COOKIEVERFSIZE);
    for (entryplus3 *e = r->READDIRPLUS3res_u.resok.reply.entries; e; e = e->nextentry) {
        if (s->print_names)
            printf("entry=%s\n", e->name);
        s->entries++;
        s->with_fh += e->name_handle.handle_follows ? 1 : 0;
        s->with_attr += e->name_attributes.attributes_follow ? 1 : 0;
        s->cookie = e->cookie;
    }
    s->eof = r->READDIRPLUS3res_u.resok.reply.eof;
}

static void cmd_readdir(int plus, struct fh *d, unsigned dircount, unsigned maxcount, int names)
{
    struct dir_state s;
    int pages = 0, empty_pages = 0;
    memset(&s, 0, sizeof(s));
    s.print_names = names;
    while (!s.eof) {
        struct call c = {.fn = plus ? readdirplus_handler : readdir_handler, .arg = &s};
        int before = s.entries, r;
        if (plus) {
            READDIRPLUS3args a;
            memset(&a, 0, sizeof(a));
            a.dir = as_fh3(d);
            a.cookie = s.cookie;
            memcpy(a.cookieverf, s.verf, NFS3_COOKIEVERFSIZE);
            a.dircount = dircount;
            a.maxcount = maxcount;
            r = rpc_nfs3_readdirplus_async(nfs(), generic_cb, &a, &c);
        } else {
            READDIR3args a;
            memset(&a, 0, sizeof(a));
            a.dir = as_fh3(d);
            a.cookie = s.cookie;
            memcpy(a.cookieverf, s.verf, NFS3_COOKIEVERFSIZE);
            a.count = maxcount;
            r = rpc_nfs3_readdir_async(nfs(), generic_cb, &a, &c);
        }
        if (r != 0)
            die(2, "READDIR: %s", rpc_get_error(nfs()));
        wait_call(nfs(), &c, plus ? "READDIRPLUS" : "READDIR");
        if (s.status != NFS3_OK)
            break;
        pages++;
        if (s.entries == before && !s.eof && ++empty_pages > 2) {
            printf("error=no progress\n");
            break;
        }
        if (pages > 1000000) {
            printf("error=too many pages\n");
            break;
        }
    }
    printf("status=%s\npages=%d\nentries=%d\neof=%d\n", nfsstat_name(s.status), pages,
           s.entries, s.eof);
    if (plus)
        printf("with_fh=%d\nwith_attr=%d\n", s.with_fh, s.with_attr);
}

static void fsinfo_handler(void *res, void *arg)
{
    FSINFO3res *r = res;
    (void)arg;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK) {
        FSINFO3resok *o = &r->FSINFO3res_u.resok;
        printf("rtmax=%u\nrtpref=%u\nrtmult=%u\nwtmax=%u\nwtpref=%u\nwtmult=%u\ndtpref=%u\n"
               "maxfilesize=%" PRIu64 "\ntime_delta=%u.%09u\nproperties=0x%x\n",
               o->rtmax, o->rtpref, o->rtmult, o->wtmax, o->wtpref, o->wtmult, o->dtpref,
               (uint64_t)o->maxfilesize, o->time_delta.seconds, o->time_delta.nseconds,
               o->properties);
    }
}

static void fsstat_handler(void *res, void *arg)
{
    FSSTAT3res *r = res;
    (void)arg;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK) {
        FSSTAT3resok *o = &r->FSSTAT3res_u.resok;
        printf("tbytes=%" PRIu64 "\nfbytes=%" PRIu64 "\nabytes=%" PRIu64 "\ntfiles=%" PRIu64
               "\nffiles=%" PRIu64 "\nafiles=%" PRIu64 "\ninvarsec=%u\n",
               (uint64_t)o->tbytes, (uint64_t)o->fbytes, (uint64_t)o->abytes,
               (uint64_t)o->tfiles, (uint64_t)o->ffiles, (uint64_t)o->afiles, o->invarsec);
    }
}

static void pathconf_handler(void *res, void *arg)
{
    PATHCONF3res *r = res;
    (void)arg;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK) {
        PATHCONF3resok *o = &r->PATHCONF3res_u.resok;
        printf("linkmax=%u\nname_max=%u\nno_trunc=%u\nchown_restricted=%u\n"
               "case_insensitive=%u\ncase_preserving=%u\n",
               o->linkmax, o->name_max, o->no_trunc, o->chown_restricted, o->case_insensitive,
               o->case_preserving);
    }
}

static void cmd_fsproc(const char *which, const char *path)
{
    struct fh f = resolve(path ? path : "");
    struct call c = {0};
    int r;
    if (!strcmp(which, "fsinfo")) {
        FSINFO3args a = {.fsroot = as_fh3(&f)};
        c.fn = fsinfo_handler;
        r = rpc_nfs3_fsinfo_async(nfs(), generic_cb, &a, &c);
    } else if (!strcmp(which, "fsstat")) {
        FSSTAT3args a = {.fsroot = as_fh3(&f)};
        c.fn = fsstat_handler;
        r = rpc_nfs3_fsstat_async(nfs(), generic_cb, &a, &c);
    } else {
        PATHCONF3args a = {.object = as_fh3(&f)};
        c.fn = pathconf_handler;
        r = rpc_nfs3_pathconf_async(nfs(), generic_cb, &a, &c);
    }
    if (r != 0)
        die(2, "%s: %s", which, rpc_get_error(nfs()));
    wait_call(nfs(), &c, which);
}

/* WRITE (chosen stability) of a deterministic pattern, then COMMIT; the two
 * verifiers must be equal while the server keeps running. */
struct write_result {
    int status;
    unsigned count;
    int committed;
    char verf[NFS3_WRITEVERFSIZE];
};

static void write_handler(void *res, void *arg)
{
    WRITE3res *r = res;
    struct write_result *w = arg;
    w->status = r->status;
    if (r->status == NFS3_OK) {
        w->count = r->WRITE3res_u.resok.count;
        w->committed = r->WRITE3res_u.resok.committed;
        memcpy(w->verf, r->WRITE3res_u.resok.verf, NFS3_WRITEVERFSIZE);
    }
}

static void commit_handler(void *res, void *arg)
{
    COMMIT3res *r = res;
    struct write_result *w = arg;
    w->status = r->status;
    if (r->status == NFS3_OK)
        memcpy(w->verf, r->COMMIT3res_u.resok.verf, NFS3_WRITEVERFSIZE);
}

static void cmd_write(const char *path, uint64_t offset, unsigned len, int stable, int commit)
{
    static const char *stable_names[] = {"UNSTABLE", "DATA_SYNC", "FILE_SYNC"};
    struct fh f = resolve(path);
    struct write_result w = {0}, cm = {0};
    WRITE3args a;
    struct call c = {.fn = write_handler, .arg = &w};
    char *buf = malloc(len ? len : 1);
    for (unsigned i = 0; i < len; i++)
        buf[i] = (char)((offset + i) * 7 + 1);
    memset(&a, 0, sizeof(a));
    a.file = as_fh3(&f);
    a.offset = offset;
    a.count = len;
    a.stable = stable;
    a.data.data_len = len;
    a.data.data_val = buf;
    if (rpc_nfs3_write_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "WRITE: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "WRITE");
    printf("write_status=%s\n", nfsstat_name(w.status));
    if (w.status == NFS3_OK) {
        printf("count=%u\ncommitted=%s\n", w.count,
               w.committed >= 0 && w.committed <= 2 ? stable_names[w.committed] : "?");
        print_hex("write_verf", w.verf, NFS3_WRITEVERFSIZE);
    }
    if (commit) {
        COMMIT3args ca = {.file = as_fh3(&f), .offset = 0, .count = 0};
        struct call cc = {.fn = commit_handler, .arg = &cm};
        if (rpc_nfs3_commit_async(nfs(), generic_cb, &ca, &cc) != 0)
            die(2, "COMMIT: %s", rpc_get_error(nfs()));
        wait_call(nfs(), &cc, "COMMIT");
        printf("commit_status=%s\n", nfsstat_name(cm.status));
        if (cm.status == NFS3_OK) {
            print_hex("commit_verf", cm.verf, NFS3_WRITEVERFSIZE);
            printf("verf_match=%d\n", !memcmp(w.verf, cm.verf, NFS3_WRITEVERFSIZE));
        }
    }
    free(buf);
}

static void read_handler(void *res, void *arg)
{
    READ3res *r = res;
    uint64_t offset = *(uint64_t *)arg;
    printf("status=%s\n", nfsstat_name(r->status));
    if (r->status == NFS3_OK) {
        READ3resok *o = &r->READ3res_u.resok;
        unsigned bad = 0;
        for (unsigned i = 0; i < o->data.data_len; i++)
            if (o->data.data_val[i] != (char)((offset + i) * 7 + 1))
                bad++;
        printf("count=%u\ndata_len=%u\neof=%u\npattern_mismatches=%u\n", o->count,
               o->data.data_len, o->eof, bad);
    }
}

static void cmd_read(const char *path, uint64_t offset, unsigned len)
{
    struct fh f = resolve(path);
    READ3args a = {.file = as_fh3(&f), .offset = offset, .count = len};
    struct call c = {.fn = read_handler, .arg = &offset};
    if (rpc_nfs3_read_async(nfs(), generic_cb, &a, &c) != 0)
        die(2, "READ: %s", rpc_get_error(nfs()));
    wait_call(nfs(), &c, "READ");
}

static void getport_handler(void *res, void *arg)
{
    (void)arg;
    printf("port=%u\n", *(uint32_t *)res);
}

/* PMAPPROC_GETPORT over TCP to the portmapper on PORT. */
static void cmd_getport(int port, int prog, int vers)
{
    struct rpc_context *rpc = connect_prog(port, PMAP_PROGRAM, PMAP_V2, "connect portmap");
    struct call c = {.fn = getport_handler};
    if (rpc_pmap2_getport_async(rpc, prog, vers, 6 /* IPPROTO_TCP */, generic_cb, &c) != 0)
        die(2, "GETPORT: %s", rpc_get_error(rpc));
    wait_call(rpc, &c, "GETPORT");
}

static void usage(void)
{
    fprintf(stderr,
            "usage: nfsproc [-u UID] [-g GID] [-p NFSPORT] [-m MOUNTPORT] SERVER EXPORT CMD [ARGS]\n"
            "  null | mnt | umnt | dump | export | getport PMAPPORT PROG VERS\n"
            "  lookup PATH | getattr PATH | getattr-fh HEX | readdirplus-fh HEX\n"
            "  access PATH [MASK] | setattr-guard PATH MODE | truncate PATH SIZE\n"
            "  setattr PATH [mode=OCTAL] [uid=N] [gid=N] [atime=SEC] [mtime=SEC]\n"
            "  create unchecked|guarded|exclusive DIR NAME [VERF8]\n"
            "  mknod fifo|sock|chr|blk|reg DIR NAME | mkdir DIR NAME | symlink DIR NAME TARGET\n"
            "  readlink PATH | remove DIR NAME | rmdir DIR NAME | rename D1 N1 D2 N2\n"
            "  link PATH DIR NAME | readdir DIR COUNT [names] | readdirplus DIR DIRCOUNT MAXCOUNT [names]\n"
            "  fsinfo | fsstat | pathconf PATH\n"
            "  write PATH OFFSET LEN [unstable|data_sync|file_sync] [commit] | read PATH OFFSET LEN\n");
    exit(1);
}

int main(int argc, char **argv)
{
    int opt;
    const char *cmd;
    while ((opt = getopt(argc, argv, "u:g:p:m:")) != -1) {
        switch (opt) {
        case 'u': uid = atoi(optarg); break;
        case 'g': gid = atoi(optarg); break;
        case 'p': nfs_port = atoi(optarg); break;
        case 'm': mount_port = atoi(optarg); break;
        default: usage();
        }
    }
    if (argc - optind < 3)
        usage();
    server = argv[optind];
    export_path = argv[optind + 1];
    cmd = argv[optind + 2];
    argv += optind + 3;
    argc -= optind + 3;
    setvbuf(stdout, NULL, _IOLBF, 0);

#define NEED(n) do { if (argc < (n)) usage(); } while (0)
    if (!strcmp(cmd, "null")) {
        struct call c = {0};
        mount_simple("null");
        printf("mount_null=ok\n");
        if (rpc_nfs3_null_async(nfs(), generic_cb, &c) != 0)
            die(2, "NULL: %s", rpc_get_error(nfs()));
        wait_call(nfs(), &c, "NFS NULL");
        printf("nfs_null=ok\n");
        return 0;
    }
    if (!strcmp(cmd, "getport")) {
        NEED(3);
        cmd_getport(atoi(argv[0]), atoi(argv[1]), atoi(argv[2]));
        return 0;
    }
    if (!strcmp(cmd, "dump") || !strcmp(cmd, "export")) {
        mount_simple(cmd);
        return 0;
    }
    if (!strcmp(cmd, "getattr-fh") || !strcmp(cmd, "readdirplus-fh")) {
        /* No MNT: the point is to use a handle we already hold. */
        struct fh f;
        NEED(1);
        if (parse_hex_fh(argv[0], &f))
            die(1, "bad hex handle");
        if (!strcmp(cmd, "getattr-fh"))
            getattr_fh(&f);
        else
            cmd_readdir(1, &f, 4096, 8192, 0);
        return 0;
    }
    if (do_mnt(strcmp(cmd, "mnt") && strcmp(cmd, "umnt")) != MNT3_OK)
        return 0;
    if (!strcmp(cmd, "mnt"))
        return 0;
    if (!strcmp(cmd, "umnt")) {
        mount_simple("umnt");
        return 0;
    }
    if (!strcmp(cmd, "lookup")) {
        /* Component by component; prints the status of the last one. */
        struct fh cur = root;
        char *copy, *save = NULL, *tok, *next;
        NEED(1);
        copy = strdup(argv[0]);
        tok = strtok_r(copy, "/", &save);
        if (!tok) {
            print_hex("fh", root.data, root.len);
            return 0;
        }
        for (; tok; tok = next) {
            struct lookup_result l = {0};
            next = strtok_r(NULL, "/", &save);
            lookup_one(&cur, tok, &l);
            if (l.status != NFS3_OK || !next) {
                printf("status=%s\n", nfsstat_name(l.status));
                if (l.status == NFS3_OK) {
                    print_hex("fh", l.fh.data, l.fh.len);
                    if (l.have_attr)
                        print_fattr("", &l.attr);
                }
                return 0;
            }
            cur = l.fh;
        }
        return 0;
    }
    if (!strcmp(cmd, "getattr")) {
        struct fh f;
        NEED(1);
        f = resolve(argv[0]);
        getattr_fh(&f);
        return 0;
    }
    if (!strcmp(cmd, "access")) {
        NEED(1);
        cmd_access(argv[0], argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 0x3f);
        return 0;
    }
    if (!strcmp(cmd, "setattr-guard")) {
        NEED(2);
        cmd_setattr_guard(argv[0], (int)strtol(argv[1], NULL, 8));
        return 0;
    }
    if (!strcmp(cmd, "setattr")) {
        NEED(1);
        cmd_setattr(argv[0], argc - 1, argv + 1);
        return 0;
    }
    if (!strcmp(cmd, "truncate")) {
        struct fh f;
        NEED(2);
        f = resolve(argv[0]);
        printf("status=%s\n", nfsstat_name(setattr(&f, -1, strtoll(argv[1], NULL, 0), NULL)));
        return 0;
    }
    if (!strcmp(cmd, "create")) {
        NEED(3);
        cmd_create(argv[0], argv[1], argv[2], argc > 3 ? argv[3] : NULL);
        return 0;
    }
    if (!strcmp(cmd, "mknod")) {
        NEED(3);
        cmd_mknod(argv[0], argv[1], argv[2]);
        return 0;
    }
    if (!strcmp(cmd, "mkdir")) {
        NEED(2);
        cmd_mkdir(argv[0], argv[1]);
        return 0;
    }
    if (!strcmp(cmd, "symlink")) {
        NEED(3);
        cmd_symlink(argv[0], argv[1], argv[2]);
        return 0;
    }
    if (!strcmp(cmd, "readlink")) {
        NEED(1);
        cmd_readlink(argv[0]);
        return 0;
    }
    if (!strcmp(cmd, "remove") || !strcmp(cmd, "rmdir")) {
        NEED(2);
        cmd_remove(!strcmp(cmd, "rmdir"), argv[0], argv[1]);
        return 0;
    }
    if (!strcmp(cmd, "rename")) {
        NEED(4);
        cmd_rename(argv[0], argv[1], argv[2], argv[3]);
        return 0;
    }
    if (!strcmp(cmd, "link")) {
        NEED(3);
        cmd_link(argv[0], argv[1], argv[2]);
        return 0;
    }
    if (!strcmp(cmd, "readdir")) {
        struct fh d;
        NEED(2);
        d = resolve(argv[0]);
        cmd_readdir(0, &d, 0, (unsigned)strtoul(argv[1], NULL, 0),
                    argc > 2 && !strcmp(argv[2], "names"));
        return 0;
    }
    if (!strcmp(cmd, "readdirplus")) {
        struct fh d;
        NEED(3);
        d = resolve(argv[0]);
        cmd_readdir(1, &d, (unsigned)strtoul(argv[1], NULL, 0),
                    (unsigned)strtoul(argv[2], NULL, 0), argc > 3 && !strcmp(argv[3], "names"));
        return 0;
    }
    if (!strcmp(cmd, "fsinfo") || !strcmp(cmd, "fsstat") || !strcmp(cmd, "pathconf")) {
        cmd_fsproc(cmd, argc > 0 ? argv[0] : NULL);
        return 0;
    }
    if (!strcmp(cmd, "write")) {
        int stable = 0;
        NEED(3);
        if (argc > 3)
            stable = !strcmp(argv[3], "file_sync") ? 2 : !strcmp(argv[3], "data_sync") ? 1 : 0;
        cmd_write(argv[0], strtoull(argv[1], NULL, 0), (unsigned)strtoul(argv[2], NULL, 0),
                  stable, argc > 4 && !strcmp(argv[4], "commit"));
        return 0;
    }
    if (!strcmp(cmd, "read")) {
        NEED(3);
        cmd_read(argv[0], strtoull(argv[1], NULL, 0), (unsigned)strtoul(argv[2], NULL, 0));
        return 0;
    }
    usage();
    return 1;
}

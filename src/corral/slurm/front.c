/* The native front-end of sbatch, squeue, sacct, scancel and corral (docs/decisions/0021-native-front-end.md).

   A Python interpreter takes 10-25 ms to start on a loaded machine, more than 1.5x real Slurm's whole sbatch
   call; this program does not start one. It hands the call to the user's command helper (corral.slurm.helper,
   a warm interpreter) with the protocol of corral.slurm.front, byte for byte: argv, environment, umask, working
   directory and stdin/stdout/stderr themselves (SCM_RIGHTS), then waits for the exit status. Whenever the
   helper has not acknowledged the call (none running, a stale socket, another uid, a stale helper, the switch
   CORRAL_COMMAND_HELPER=0, inside a job) it execs the Python entry point, which runs the call and starts a
   helper for the next one: nothing is lost, and an acknowledged call is never run again.

   Built by corral.slurm.build_front (make venv), which writes front_config.h: the interpreter, corral's
   front.py and the Python version (what names the helper's socket) and where the Python entry points are. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

/* From corral.slurm.front, by build_front: FINGERPRINT_PREFIX (+ _LEN), ENTRY_POINTS, PROTOCOL, HELPER_SWITCH,
   FALLBACK_MARK (+ _ABSENT, _REFUSED), ACCEPTED, START_VARIABLES_LIST, SLURM_COMMANDS_LIST, CORRAL_COMMAND, CORRAL_SUBCOMMANDS_LIST. */
#include "front_config.h"

#define MAX_REQUEST (8u << 20) /* the helper's limit (corral.slurm.helper.MAX_REQUEST_BYTES) */

extern char **environ;

/* What the helper's interpreter fixed at its start: a caller that differs in any of these gets its own helper. */
static const char *const START_VARIABLES[] = START_VARIABLES_LIST;
static const char *const SLURM_COMMANDS[] = SLURM_COMMANDS_LIST;
/* The `corral` subcommands the helper serves; the rest run in their own interpreter: `corral up`, `run`,
   `logs -f` and the like want the terminal as their own. */
static const char *const CORRAL_SUBCOMMANDS[] = CORRAL_SUBCOMMANDS_LIST;

static volatile sig_atomic_t interrupted;

static int set(const char *variable) { /* as Python's `env.get(variable)` is true: set and not empty */
    const char *value = getenv(variable);
    return value && *value;
}

static int listed(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcmp(name, *list) == 0) return 1;
    return 0;
}

/* `corral queue --watch` (also -w, or in a group such as -lw) runs until Ctrl-C, which the command takes as
   its normal end (status 0): this front-end would leave at Ctrl-C with 130, and a call that long gains
   nothing from the warm helper, so it runs in Python. */
static int watching(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return 0;
        if (strcmp(argv[i], "--watch") == 0) return 1;
        if (argv[i][0] == '-' && argv[i][1] != '-' && strchr(argv[i], 'w')) return 1;
    }
    return 0;
}

/* Run the call in the Python entry point instead: this process becomes it. */
static void run_in_python(const char *command, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", ENTRY_POINTS, command);
    execv(path, argv);
    fprintf(stderr, "%s: error: cannot run corral's %s (%s): %s; reinstall corral (make venv)\n", command, command,
            path, strerror(errno));
    exit(1);
}

/* ---- the socket's name: corral.slurm.front.fingerprint and private_directory ---- */

typedef struct { uint64_t value; } Fnv;

static void fnv_bytes(Fnv *h, const void *data, size_t size) {
    const unsigned char *p = data;
    for (size_t i = 0; i < size; i++) h->value = (h->value ^ p[i]) * 0x100000001B3ull;
}

static uint64_t fingerprint(void) {
    Fnv h = {0xCBF29CE484222325ull};
    fnv_bytes(&h, FINGERPRINT_PREFIX, FINGERPRINT_PREFIX_LEN);
    for (const char *const *name = START_VARIABLES; *name; name++) {
        const char *value = getenv(*name);
        fnv_bytes(&h, "\0", 1);
        fnv_bytes(&h, *name, strlen(*name));
        fnv_bytes(&h, "=", 1);
        if (value) fnv_bytes(&h, value, strlen(value));
        else fnv_bytes(&h, "None", 4); /* Python's f"{name}={None}" */
    }
    /* front.NAMESPACES: a helper serves only callers in its own network and mount namespaces */
    static const char *const namespaces[] = {"/proc/self/ns/net", "/proc/self/ns/mnt"};
    for (size_t i = 0; i < sizeof namespaces / sizeof *namespaces; i++) {
        char link[256];
        ssize_t size = readlink(namespaces[i], link, sizeof link);
        fnv_bytes(&h, "\0", 1);
        if (size > 0 && (size_t)size < sizeof link) fnv_bytes(&h, link, (size_t)size);
        else fnv_bytes(&h, "None", 4);
    }
    return h.value;
}

static int private_to(const char *path, uid_t uid) {
    struct stat info;
    if (lstat(path, &info) != 0) return 0;
    return info.st_uid == uid && S_ISDIR(info.st_mode) && !(info.st_mode & 077);
}

/* A directory only this user owns and can enter ($XDG_RUNTIME_DIR/corral, else /tmp/corral-UID), made if
   missing; 0 if the one found is not such. */
static int private_directory(char *out, size_t size) {
    uid_t uid = getuid();
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    if (runtime && *runtime && private_to(runtime, uid)) snprintf(out, size, "%s/corral", runtime);
    else snprintf(out, size, "/tmp/corral-%u", (unsigned)uid);
    if (mkdir(out, 0700) != 0 && errno != EEXIST) return 0;
    return private_to(out, uid);
}

/* ---- the call ---- */

typedef struct { char *data; size_t size, capacity; } Buffer;

static int append(Buffer *b, const void *data, size_t size) {
    if (b->size + size > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 4096;
        while (capacity < b->size + size) capacity *= 2;
        char *grown = realloc(b->data, capacity);
        if (!grown) return 0;
        b->data = grown;
        b->capacity = capacity;
    }
    memcpy(b->data + b->size, data, size);
    b->size += size;
    return 1;
}

static int field(Buffer *b, const char *text, int first) {
    return (first || append(b, "", 1)) && append(b, text, strlen(text));
}

/* corral.slurm.front.request: a 4-byte length, then PROTOCOL, command, argv[0], umask, argument count, the
   arguments, and KEY=VALUE per variable, separated by NUL bytes. */
static int request(Buffer *b, const char *command, int argc, char **argv) {
    char number[32];
    mode_t mask = umask(077);
    umask(mask);
    int ok = append(b, "\0\0\0\0", 4) && field(b, PROTOCOL, 1) && field(b, command, 0) && field(b, argv[0], 0);
    snprintf(number, sizeof number, "%u", (unsigned)mask);
    ok = ok && field(b, number, 0);
    snprintf(number, sizeof number, "%d", argc - 1);
    ok = ok && field(b, number, 0);
    for (int i = 1; ok && i < argc; i++) ok = field(b, argv[i], 0);
    for (char **var = environ; ok && *var; var++) ok = field(b, *var, 0);
    size_t payload = b->size - 4;
    if (!ok || payload > MAX_REQUEST) return 0;
    for (int i = 0; i < 4; i++) b->data[i] = (char)(payload >> (8 * (3 - i)));
    return 1;
}

static uid_t peer_uid(int sock) {
    struct ucred cred;
    socklen_t size = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) return (uid_t)-1;
    return cred.uid;
}

/* Send the call with the descriptors; 1 once all of it is sent. */
static int send_call(int sock, const Buffer *b) {
    int fds[4] = {0, 1, 2, -1};
    fds[3] = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fds[3] < 0) return 0;
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec io = {b->data, b->size};
    struct msghdr msg = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    close(fds[3]);
    if (sent < 0) return 0;
    for (size_t done = (size_t)sent; done < b->size; done += (size_t)sent) {
        sent = send(sock, b->data + done, b->size - done, MSG_NOSIGNAL);
        if (sent <= 0) return 0;
    }
    return 1;
}

/* Ctrl-C while the helper runs the call: leave, closing the connection, and the helper's child is
   interrupted as the command would have been (corral.slurm.helper._main_status). */
static void on_interrupt(int signum) {
    (void)signum;
    interrupted = 1;
}

/* The command's exit status from the helper, or -1 where it did not take the call (run it in Python then);
   `found` says which: FALLBACK_ABSENT (no helper: the entry point starts one) or FALLBACK_REFUSED. */
static int through_helper(const char *command, int argc, char **argv, const char **found) {
    *found = FALLBACK_REFUSED;
    char directory[4096], path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (!private_directory(directory, sizeof directory)) return -1;
    int length = snprintf(path, sizeof path, "%s/helper-%016llx.sock", directory,
                          (unsigned long long)fingerprint());
    if (length < 0 || (size_t)length >= sizeof path) return -1;
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return -1;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    memcpy(address.sun_path, path, (size_t)length + 1);
    if (connect(sock, (struct sockaddr *)&address, sizeof address) != 0) {
        *found = FALLBACK_ABSENT;
        close(sock);
        return -1;
    }
    if (peer_uid(sock) != getuid()) { /* not the user's own: it must not see the environment */
        close(sock);
        return -1;
    }
    Buffer b = {0};
    struct sigaction interrupt = {.sa_handler = on_interrupt}; /* no SA_RESTART: recv returns EINTR */
    sigemptyset(&interrupt.sa_mask);
    sigaction(SIGINT, &interrupt, NULL);
    char answer = 0;
    ssize_t got = -1;
    if (request(&b, command, argc, argv) && send_call(sock, &b)) got = recv(sock, &answer, 1, 0);
    free(b.data);
    if (interrupted) _exit(130);
    if (got != 1 || answer != ACCEPTED) { /* refused, stale, or gone before it took the call: nothing done */
        close(sock);
        signal(SIGINT, SIG_DFL);
        return -1;
    }
    unsigned char status[4];
    size_t have = 0;
    while (have < 4 && !interrupted) {
        got = recv(sock, status + have, 4 - have, 0);
        if (got > 0) have += (size_t)got;
        else if (got == 0 || errno != EINTR) break;
    }
    if (interrupted) _exit(130); /* as corral.slurm.front: KeyboardInterrupt is 130 */
    if (have < 4) {
        fprintf(stderr, "%s: error: corral's command helper ended before %s finished; it may have acted (check "
                        "with squeue before running it again)\n", command, command);
        return 1;
    }
    int32_t code = (int32_t)((uint32_t)status[0] << 24 | (uint32_t)status[1] << 16 | (uint32_t)status[2] << 8 |
                             (uint32_t)status[3]);
    return code & 0xff; /* what sys.exit(code) leaves as the process's status */
}

int main(int argc, char **argv) {
    char name[4096];
    snprintf(name, sizeof name, "%s", argc > 0 ? argv[0] : "");
    const char *command = basename(name);
    if (!listed(command, SLURM_COMMANDS) && strcmp(command, CORRAL_COMMAND) != 0) {
        fprintf(stderr, "corral's front-end: run as sbatch, squeue, sacct, scancel or corral, not as '%s'\n", command);
        return 2;
    }
    const char *helper_switch = getenv(HELPER_SWITCH);
    int wanted = !(helper_switch && strcmp(helper_switch, "0") == 0) && !set("SLURM_JOB_ID") && !set("CORRAL_JOB_ID");
    /* `corral --help`, `corral up`, ... : not the helper's (see CORRAL_SUBCOMMANDS). */
    if (strcmp(command, CORRAL_COMMAND) == 0 && !(argc > 1 && listed(argv[1], CORRAL_SUBCOMMANDS))) wanted = 0;
    if (strcmp(command, CORRAL_COMMAND) == 0 && watching(argc, argv)) wanted = 0;
    if (wanted) {
        const char *found;
        int status = through_helper(command, argc, argv, &found);
        if (status >= 0) return status;
        setenv(FALLBACK_MARK, found, 1); /* the entry point takes it out of the environment at once */
    }
    run_in_python(command, argv);
    return 1;
}

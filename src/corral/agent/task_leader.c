/* A task's leader: the small native process that starts one task, stays its parent and records how it
 * ended (decisions 0015, 0017, 0022). Spawned (posix_spawn) by the agent's leader factory (task_leader.py):
 *
 *     corral-task-leader SPEC_FD REPLY_FD [CGROUP_PROCS ...]
 *
 * with the task's stdin, stdout and stderr as its own 0, 1 and 2, in a session of its own. In order:
 *
 * - Enter the cgroups (write 0 to each CGROUP_PROCS), so the task is born there; on failure reply
 *   {"error": ..., "own": true} (the agent's failure, not the job's).
 * - Read the spec on SPEC_FD (leaders.py's encode_spec: "LENGTH\n" and LENGTH bytes of NUL-terminated
 *   fields): argv, env, cwd, the user to run as, the exit file, the contact file, the cgroup leaf,
 *   whether stdin becomes the controlling terminal.
 * - Start the task as its own session and process group, as that user, with the parent-death signal
 *   SIGKILL (set after the change of user, which would clear it): whoever kills the leader kills the task.
 * - Reply on REPLY_FD {"pid": N}, or {"error": ..., "exit_code": 127|126|1} as Python's Popen reported it
 *   (the first leaders were Python; the messages and codes are kept).
 * - Let go of the task's streams; wait for the agent's "ok" on SPEC_FD, sent once the task is in its
 *   spool. Without it the task is killed: nothing would ever know it runs.
 * - Wait for the task (a pidfd), and write {"returncode": N} (negative for a signal) to the exit file,
 *   whole or not at all (a temporary file renamed). Meanwhile fence: every fence_after_s / 8 (at most
 *   every second) read the contact file ({"fence_after_s": F, "contact": T}, T on CLOCK_BOOTTIME); once
 *   the contact is more than F old SIGSTOP the task's process group and the other processes of its cgroup
 *   leaf but the leaders, until all are stopped; SIGCONT them once the contact is fresh again.
 *
 * Native because a forked Python leader cost 4.5-5.3 ms of machine CPU per task (copy-on-write faults and
 * the teardown of a Python address space), where this costs a fraction of a millisecond. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#define EXIT_SPAWN_FAILED 1
#define EXIT_NOT_EXECUTABLE 126
#define EXIT_NOT_FOUND 127
#define SPEC_MAX_BYTES (64u << 20)
#define LOOK_EVERY_MAX_S 1.0
#define FREEZE_ROUNDS 50 /* of SIGSTOP to what still runs, 10 ms apart (a process may be forking) */
#define FACTORY_FLAG "--factory"
#define LEADER_FLAG "--leader" /* a forked leader's command line then (not an option anyone passes) */
_Static_assert(sizeof LEADER_FLAG <= sizeof FACTORY_FLAG, "written over the factory's argv[1]");
#define LEADER_FDS 5 /* stdin, stdout, stderr, SPEC_FD, REPLY_FD */
#define REQUEST_MAX_BYTES (64 * 1024)
#define DEFAULT_PATH "/bin:/usr/bin" /* Python's os.defpath, which Popen searched without PATH */

struct spec {
    char **argv, **env;
    const char *cwd, *exit_file, *contact_file, *cgroup_leaf;
    int has_user, controlling_terminal;
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    size_t ngroups;
};

struct buffer {
    char *data;
    size_t len, cap;
};

static void append(struct buffer *out, const char *text, size_t len) {
    if (out->len + len + 1 > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (out->len + len + 1 > cap) cap *= 2;
        char *data = realloc(out->data, cap);
        if (!data) abort();
        out->data = data;
        out->cap = cap;
    }
    memcpy(out->data + out->len, text, len);
    out->len += len;
    out->data[out->len] = 0;
}

static void appendf(struct buffer *out, const char *format, ...) {
    char text[512];
    va_list args;
    va_start(args, format);
    int len = vsnprintf(text, sizeof text, format, args);
    va_end(args);
    if (len > 0) append(out, text, (size_t)len < sizeof text ? (size_t)len : sizeof text - 1);
}

/* `text` as a JSON string; bytes that are not printable ASCII as \u00XX (the agent reads it as text). */
static void append_json_string(struct buffer *out, const char *text) {
    append(out, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char escaped[2] = {'\\', (char)*c};
            append(out, escaped, 2);
        } else if (*c < 0x20 || *c >= 0x7f) {
            appendf(out, "\\u%04x", *c);
        } else {
            append(out, (const char *)c, 1);
        }
    }
    append(out, "\"", 1);
}

static int write_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t written = write(fd, data, len);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += written;
        len -= (size_t)written;
    }
    return 0;
}

static int reply(int fd, struct buffer *message) {
    int ok = write_all(fd, message->data, message->len) == 0;
    close(fd);
    free(message->data);
    return ok;
}

static void reply_error(int fd, const char *error, int exit_code, int own) {
    struct buffer message = {0};
    append(&message, "{\"error\": ", 10);
    append_json_string(&message, error);
    appendf(&message, ", \"exit_code\": %d%s}", exit_code, own ? ", \"own\": true" : "");
    reply(fd, &message);
}

static int read_exactly(int fd, char *into, size_t len) {
    while (len) {
        ssize_t got = read(fd, into, len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        into += got;
        len -= (size_t)got;
    }
    return 0;
}

/* The spec's fields: "LENGTH\n", then LENGTH bytes of NUL-terminated fields. NULL if malformed. */
static char *read_fields(int fd, size_t *len) {
    char header[24];
    size_t used = 0;
    for (;;) {
        if (used == sizeof header || read_exactly(fd, header + used, 1) < 0) return NULL;
        if (header[used] == '\n') break;
        used++;
    }
    header[used] = 0;
    char *end;
    unsigned long long length = strtoull(header, &end, 10);
    if (end == header || *end || length == 0 || length > SPEC_MAX_BYTES) return NULL;
    char *data = malloc(length);
    if (!data || read_exactly(fd, data, length) < 0 || data[length - 1] != 0) return NULL;
    *len = length;
    return data;
}

struct cursor {
    char *at, *end;
};

static char *next_field(struct cursor *cursor) {
    if (cursor->at >= cursor->end) return NULL;
    char *field = cursor->at;
    cursor->at += strlen(field) + 1;
    return field;
}

static int next_number(struct cursor *cursor, unsigned long long *value) {
    char *field = next_field(cursor), *end;
    if (!field || !*field) return -1;
    errno = 0;
    *value = strtoull(field, &end, 10);
    return *end || errno ? -1 : 0;
}

static char **next_list(struct cursor *cursor) {
    unsigned long long count;
    if (next_number(cursor, &count) < 0 || count > SPEC_MAX_BYTES) return NULL;
    char **list = calloc(count + 1, sizeof *list);
    if (!list) return NULL;
    for (unsigned long long i = 0; i < count; i++)
        if (!(list[i] = next_field(cursor))) return NULL;
    return list;
}

static const char *optional(const char *field) { return field && *field ? field : NULL; }

/* argv; env; cwd; user ("" or "UID GID G1 G2 ..."); exit file; contact file; cgroup leaf; terminal. */
static int parse_spec(char *data, size_t len, struct spec *spec) {
    struct cursor cursor = {data, data + len};
    char *user, *terminal;
    if (!(spec->argv = next_list(&cursor)) || !spec->argv[0] || !(spec->env = next_list(&cursor))) return -1;
    spec->cwd = next_field(&cursor);
    user = next_field(&cursor);
    spec->exit_file = next_field(&cursor);
    spec->contact_file = optional(next_field(&cursor));
    spec->cgroup_leaf = optional(next_field(&cursor));
    terminal = next_field(&cursor);
    if (!spec->cwd || !user || !spec->exit_file || !*spec->exit_file || !terminal) return -1;
    spec->controlling_terminal = strcmp(terminal, "1") == 0;
    if (!*user) return 0;
    spec->has_user = 1;
    spec->groups = calloc(strlen(user) / 2 + 1, sizeof *spec->groups);
    char *at = user, *end;
    for (int index = 0; *at; index++) {
        errno = 0;
        unsigned long id = strtoul(at, &end, 10);
        if (end == at || errno) return -1;
        if (index == 0) spec->uid = (uid_t)id;
        else if (index == 1) spec->gid = (gid_t)id;
        else spec->groups[spec->ngroups++] = (gid_t)id;
        at = end + (*end == ' ');
    }
    return 0;
}

/* Close every descriptor from `first` up but `keep_a` and `keep_b`: close_range over the gaps (three
 * system calls whatever the limit), or, on a kernel without it (before 5.9), those /proc/self/fd lists. */
static void close_from(int first, int keep_a, int keep_b) {
    int low = keep_a < keep_b ? keep_a : keep_b, high = keep_a < keep_b ? keep_b : keep_a;
    int keep[2] = {low, high}, from = first, ranges_ok = 1;
    for (int i = 0; i < 2 && ranges_ok; i++) {
        if (keep[i] < from) continue;
        if (keep[i] > from) ranges_ok = syscall(SYS_close_range, from, keep[i] - 1, 0) == 0;
        from = keep[i] + 1;
    }
    if (ranges_ok && syscall(SYS_close_range, from, ~0U, 0) == 0) return;
    DIR *dir = opendir("/proc/self/fd");
    if (!dir) {
        for (int fd = first; fd < 1024; fd++)
            if (fd != keep_a && fd != keep_b) close(fd);
        return;
    }
    int own = dirfd(dir), fds[1024], count = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) && count < 1024) {
        int fd = atoi(entry->d_name);
        if (entry->d_name[0] != '.' && fd >= first && fd != own && fd != keep_a && fd != keep_b) fds[count++] = fd;
    }
    closedir(dir);
    for (int i = 0; i < count; i++) close(fds[i]);
}

/* --- the task ------------------------------------------------------------------------------------- */

struct failure {
    int err;
    int at_chdir; /* Popen named the cwd, not the program, when chdir failed */
};

/* What the task's child shares with its leader until it execs: it runs in the leader's memory
 * (CLONE_VM | CLONE_VFORK, as posix_spawn does), so it reports a failure here, not through a pipe. */
struct launch {
    struct spec *spec;
    pid_t leader;
    struct failure failure;
};

static char child_stack[64 * 1024] __attribute__((aligned(16)));

static int fail_in_child(struct launch *launch, int err, int at_chdir) {
    launch->failure.err = err ? err : EINVAL;
    launch->failure.at_chdir = at_chdir;
    _exit(EXIT_NOT_FOUND);
}

static const char *env_path(char **env) {
    for (char **entry = env; *entry; entry++)
        if (strncmp(*entry, "PATH=", 5) == 0) return *entry + 5;
    return DEFAULT_PATH;
}

/* As Popen: the program itself if it names a directory, else each PATH entry (the task's PATH); the
 * error of the first attempt that failed other than ENOENT/ENOTDIR, else the last. */
static int exec_task(struct spec *spec) {
    const char *program = spec->argv[0];
    if (strchr(program, '/')) {
        execve(program, spec->argv, spec->env);
        return errno;
    }
    const char *path = env_path(spec->env);
    int saved = 0, last = ENOENT;
    char candidate[PATH_MAX];
    for (const char *dir = path;; dir = strchr(dir, ':') + 1) {
        size_t len = strcspn(dir, ":");
        int written = len ? snprintf(candidate, sizeof candidate, "%.*s/%s", (int)len, dir, program)
                          : snprintf(candidate, sizeof candidate, "%s", program);
        if (written > 0 && (size_t)written < sizeof candidate) {
            execve(candidate, spec->argv, spec->env);
            last = errno;
            if (last != ENOENT && last != ENOTDIR && !saved) saved = last;
        }
        if (!dir[len]) break;
    }
    return saved ? saved : last;
}

/* The task's child, in the leader's memory until execve. The change of user is made with raw system
 * calls: glibc's wrappers would act on the leader's (shared) thread list, not on this child alone. Its
 * descriptor table is its own (no CLONE_FILES): it keeps only 0, 1 and 2. */
static int become_task(void *arg) {
    struct launch *launch = arg;
    struct spec *spec = launch->spec;
    setsid();
    if (chdir(spec->cwd) < 0) fail_in_child(launch, errno, 1);
    if (spec->has_user) {
        if (syscall(SYS_setgroups, spec->ngroups, spec->groups) < 0
            || syscall(SYS_setregid, spec->gid, spec->gid) < 0 || syscall(SYS_setreuid, spec->uid, spec->uid) < 0)
            fail_in_child(launch, errno, 0);
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) fail_in_child(launch, errno, 0);
    if (getppid() != launch->leader) _exit(EXIT_SPAWN_FAILED); /* the leader died already: so does its task */
    if (spec->controlling_terminal && ioctl(0, TIOCSCTTY, 0) < 0) fail_in_child(launch, errno, 0);
    close_from(3, -1, -1);
    return fail_in_child(launch, exec_task(spec), 0);
}

static void describe_failure(struct buffer *out, struct spec *spec, struct failure *failure, int *exit_code) {
    const char *name = spec->argv[0], *reason = strerror(failure->err);
    if (failure->err == ENOENT) {
        *exit_code = EXIT_NOT_FOUND;
        appendf(out, "command not found: %s (%s)", name, reason);
    } else if (failure->err == EACCES || failure->err == EPERM) {
        *exit_code = EXIT_NOT_EXECUTABLE;
        appendf(out, "cannot execute %s: %s", name, reason);
    } else {
        *exit_code = EXIT_SPAWN_FAILED;
        appendf(out, "cannot start %s: [Errno %d] %s: '%s'", name, failure->err, reason,
                failure->at_chdir ? spec->cwd : name);
    }
}

/* The task's pid, or -1 after replying why it could not start. The leader is suspended until its child
 * has exec'd or exited (CLONE_VFORK): no copy of its address space, no copy-on-write faults. */
static pid_t start_task(struct spec *spec, int reply_fd) {
    struct launch launch = {spec, getpid(), {0, 0}};
    struct buffer why = {0};
    int exit_code = EXIT_SPAWN_FAILED;
    pid_t pid = clone(become_task, child_stack + sizeof child_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &launch);
    if (pid > 0 && !launch.failure.err) return pid; /* it exec'd: the task runs */
    if (pid < 0) {
        launch.failure.err = errno;
    } else {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    }
    describe_failure(&why, spec, &launch.failure, &exit_code);
    reply_error(reply_fd, why.data, exit_code, 0);
    return -1;
}

/* --- contact and fencing ---------------------------------------------------------------------------- */

struct contact {
    const char *path;
    double at, fence_after_s; /* NAN: no fencing */
};

static double boottime(void) {
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* The number after `"key":` in `text` (contact.py's json.dumps); 0 if found, 1 for null, -1 if absent. */
static int json_number(const char *text, const char *key, double *value) {
    const char *at = strstr(text, key);
    if (!at) return -1;
    at += strlen(key);
    while (*at == ' ') at++;
    if (*at++ != ':') return -1;
    while (*at == ' ') at++;
    if (strncmp(at, "null", 4) == 0) return 1;
    char *end;
    *value = strtod(at, &end);
    return end == at || !isfinite(*value) ? -1 : 0;
}

/* Not written yet (no fencing) or unreadable: the last values read stand. */
static void read_contact(struct contact *contact) {
    if (!contact->path) return;
    char text[4096];
    int fd = open(contact->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len <= 0) return;
    text[len] = 0;
    double at, after = NAN;
    int found_after = json_number(text, "\"fence_after_s\"", &after);
    if (json_number(text, "\"contact\"", &at) != 0 || found_after < 0) return;
    contact->at = at;
    contact->fence_after_s = found_after == 1 ? NAN : after;
}

static double look_every_s(struct contact *contact) {
    if (isnan(contact->fence_after_s)) return LOOK_EVERY_MAX_S;
    return fmin(LOOK_EVERY_MAX_S, contact->fence_after_s / 8);
}

static int contact_lost(struct contact *contact) {
    read_contact(contact);
    return !isnan(contact->fence_after_s) && boottime() - contact->at > contact->fence_after_s;
}

/* A process's /proc stat fields after the command name, into `fields` (state, ppid, pgrp). */
static int proc_stat(pid_t pid, char *state, long *pgrp) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len <= 0) return -1;
    text[len] = 0;
    char *after = strrchr(text, ')');
    long ppid;
    if (!after || sscanf(after + 1, " %c %ld %ld", state, &ppid, pgrp) != 3) return -1;
    return 0;
}

static int stopped(pid_t pid) {
    char state;
    long pgrp;
    return proc_stat(pid, &state, &pgrp) < 0 || strchr("TtZX", state) != NULL;
}

static size_t first_arg(pid_t pid, char *into, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t len = read(fd, into, size - 1);
    close(fd);
    if (len <= 0) return 0;
    into[len] = 0;
    return strlen(into) + 1;
}

/* Another task's leader: this program, run by this user (a task run as its user cannot pose as one). */
static int is_leader(pid_t pid, const char *me) {
    char path[64], first[PATH_MAX + 1];
    struct stat info;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    return stat(path, &info) == 0 && info.st_uid == getuid() && first_arg(pid, first, sizeof first)
           && strcmp(first, me) == 0;
}

struct pids {
    pid_t *at;
    size_t len, cap;
};

static void add_pid(struct pids *pids, pid_t pid) {
    if (pids->len == pids->cap) {
        pids->cap = pids->cap ? 2 * pids->cap : 64;
        pids->at = realloc(pids->at, pids->cap * sizeof *pids->at);
        if (!pids->at) abort();
    }
    pids->at[pids->len++] = pid;
}

/* The task's processes: its process group's, and the others in its cgroup leaf but the leaders. */
static void members(pid_t pgid, const char *leaf, const char *me, struct pids *found) {
    found->len = 0;
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    while (proc && (entry = readdir(proc))) {
        char state;
        long pgrp;
        pid_t pid = (pid_t)atoi(entry->d_name);
        if (pid > 0 && proc_stat(pid, &state, &pgrp) == 0 && pgrp == pgid) add_pid(found, pid);
    }
    if (proc) closedir(proc);
    if (!leaf) return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/cgroup.procs", leaf);
    FILE *procs = fopen(path, "re");
    int pid;
    while (procs && fscanf(procs, "%d", &pid) == 1)
        if (pid != getpid() && !is_leader(pid, me)) add_pid(found, pid);
    if (procs) fclose(procs);
}

/* SIGSTOP the task's process group and whatever else runs in its cgroup leaf (setsid or not) but the
 * leaders there, again until every one of them is stopped (a process may have been forking). */
static void freeze(pid_t pgid, const char *leaf, const char *me) {
    struct pids found = {0};
    for (int round = 0; round < FREEZE_ROUNDS; round++) {
        members(pgid, leaf, me, &found);
        int running = 0;
        for (size_t i = 0; i < found.len; i++) running |= !stopped(found.at[i]);
        if (!running) break;
        kill(-pgid, SIGSTOP);
        for (size_t i = 0; i < found.len; i++)
            if (!stopped(found.at[i])) kill(found.at[i], SIGSTOP);
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    free(found.at);
}

static void thaw(pid_t pgid, const char *leaf, const char *me) {
    struct pids found = {0};
    kill(-pgid, SIGCONT);
    members(pgid, leaf, me, &found);
    for (size_t i = 0; i < found.len; i++) kill(found.at[i], SIGCONT);
    free(found.at);
}

/* Whether the task exited within `timeout_s`: its pidfd readable (or, without pidfds, waitpid). */
static int exited_within(pid_t pid, int pidfd, double timeout_s) {
    if (pidfd >= 0) {
        struct pollfd ready = {pidfd, POLLIN, 0};
        int got = poll(&ready, 1, (int)(timeout_s * 1000));
        return got > 0;
    }
    for (double waited = 0; waited < timeout_s; waited += 0.01) {
        siginfo_t info = {0};
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) return 1;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

/* The task's returncode as Popen gives it (negative: killed by that signal), once it has exited; frozen
 * while contact is lost, thawed when it is back. */
static int await_task(pid_t pid, struct spec *spec, const char *me) {
    struct contact contact = {spec->contact_file, boottime(), NAN};
    read_contact(&contact);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0), frozen = 0;
    while (!exited_within(pid, pidfd, look_every_s(&contact))) {
        int lost = contact_lost(&contact);
        if (lost && !frozen) freeze(pid, spec->cgroup_leaf, me);
        else if (frozen && !lost) thaw(pid, spec->cgroup_leaf, me);
        frozen = lost;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -SIGKILL;
    return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

/* {"returncode": N} to `path`, whole or not at all. */
static void record_exit(const char *path, int returncode) {
    char temporary[PATH_MAX], text[64];
    snprintf(temporary, sizeof temporary, "%s.tmp", path);
    int len = snprintf(text, sizeof text, "{\"returncode\": %d}", returncode);
    int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return;
    int written = write_all(fd, text, (size_t)len) == 0;
    if (close(fd) == 0 && written) rename(temporary, path);
    else unlink(temporary);
}

/* --- the leader ---------------------------------------------------------------------------------- */

static void release_streams(void) {
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; fd++) dup2(null, fd);
    if (null > 2) close(null);
}

/* Whether the agent says "ok" (it recorded the task) before it closes SPEC_FD. */
static int confirmed(int fd) {
    char data[2];
    int ok = read_exactly(fd, data, 2) == 0 && memcmp(data, "ok", 2) == 0;
    close(fd);
    return ok;
}

/* Every signal to its default (what the agent ignored, an exec keeps ignored) and none blocked. */
static void default_signals(void) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
}

/* The signals the factory ignores and no other (it set every other to its default when it started). */
static const int factory_ignores[] = {SIGCHLD, SIGINT, SIGPIPE};

static int enter_cgroups(int count, char **cgroup_procs, int reply_fd) {
    for (int i = 0; i < count; i++) {
        int fd = open(cgroup_procs[i], O_WRONLY | O_CLOEXEC);
        if (fd >= 0 && write_all(fd, "0", 1) == 0 && close(fd) == 0) continue;
        int err = errno;
        if (fd >= 0) close(fd);
        char *cgroup = strdup(cgroup_procs[i]), *slash = strrchr(cgroup, '/');
        if (slash) *slash = 0;
        struct buffer why = {0};
        appendf(&why, "cannot start the task in cgroup %s: %s", cgroup, strerror(err));
        reply_error(reply_fd, why.data, EXIT_SPAWN_FAILED, 1);
        return -1;
    }
    return 0;
}

/* One task's leader, from its spec to its exit record; `me`: this program's path (how other leaders
 * are told apart in a cgroup leaf). */
static int lead(int spec_fd, int reply_fd, int cgroups, char **cgroup_procs, const char *me) {
    close_from(3, spec_fd, reply_fd);
    if (chdir("/") < 0 || enter_cgroups(cgroups, cgroup_procs, reply_fd) < 0) return 0;
    struct spec spec = {0};
    size_t len;
    char *fields = read_fields(spec_fd, &len);
    if (!fields || parse_spec(fields, len, &spec) < 0) {
        reply_error(reply_fd, "the task's leader got a malformed spec", EXIT_SPAWN_FAILED, 1);
        return 0;
    }
    pid_t task = start_task(&spec, reply_fd);
    if (task < 0) return 0;
    struct buffer message = {0};
    appendf(&message, "{\"pid\": %d}", (int)task);
    int replied = reply(reply_fd, &message);
    release_streams();
    if (!replied || !confirmed(spec_fd)) kill(-task, SIGKILL);
    record_exit(spec.exit_file, await_task(task, &spec, me));
    return 0;
}

/* --- the factory --------------------------------------------------------------------------------- */

/* A process's start in seconds since boot (its stat's field 22, in clock ticks), as the spool records
 * it; 0 if unreadable. */
static double started_s(pid_t pid) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len <= 0) return 0;
    text[len] = 0;
    char *at = strrchr(text, ')');
    for (int field = 2; at && field < 22; field++) at = strchr(at + 1, ' ');
    return at ? (double)strtoull(at + 1, NULL, 10) / (double)sysconf(_SC_CLK_TCK) : 0;
}

/* The request's cgroup.procs paths ("COUNT\0" then COUNT NUL-terminated paths: leaders.py's
 * LeaderFactory), into `paths`; their count, or -1 if malformed. */
static int request_paths(char *data, size_t len, char **paths, int most) {
    struct cursor cursor = {data, data + len};
    unsigned long long count;
    if (len == 0 || data[len - 1] != 0 || next_number(&cursor, &count) < 0 || count > (unsigned long long)most)
        return -1;
    for (unsigned long long i = 0; i < count; i++)
        if (!(paths[i] = next_field(&cursor))) return -1;
    return cursor.at == cursor.end ? (int)count : -1;
}

/* A leader for one request: forked (this process is small and single-threaded: no exec, no copy of
 * much), a session of its own with the task's streams as its 0, 1 and 2. Its pid and start, or why not. */
static void spawn_leader(char *data, size_t len, int *fds, int nfds, char **argv, struct buffer *answer) {
    char *paths[64];
    int cgroups = request_paths(data, len, paths, 64);
    if (nfds != LEADER_FDS) {
        appendf(answer, "{\"error\": \"a leader needs %d file descriptors, got %s%d\"}", LEADER_FDS,
                nfds < 0 ? "more than " : "", nfds < 0 ? LEADER_FDS : nfds);
        return;
    }
    if (cgroups < 0) {
        appendf(answer, "{\"error\": \"the task leader factory got a malformed request\"}");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        memcpy(argv[1], LEADER_FLAG, sizeof LEADER_FLAG); /* `ps` tells it from its factory; no longer */
        for (size_t i = 0; i < sizeof factory_ignores / sizeof *factory_ignores; i++)
            signal(factory_ignores[i], SIG_DFL);
        for (int target = 0; target < 3; target++) dup2(fds[target], target);
        _exit(lead(fds[3], fds[4], cgroups, paths, argv[0]));
    }
    if (pid < 0) {
        append(answer, "{\"error\": ", 10);
        struct buffer why = {0};
        appendf(&why, "cannot start a task leader: %s", strerror(errno));
        append_json_string(answer, why.data);
        append(answer, "}", 1);
        free(why.data);
        return;
    }
    appendf(answer, "{\"pid\": %d, \"started\": %.2f}", (int)pid, started_s(pid));
}

/* Each request on `sock` (its cgroup.procs paths, and the leader's five descriptors: stdin, stdout,
 * stderr, SPEC_FD, REPLY_FD) gets a leader and a reply, until the agent closes the socket or dies.
 * Leaders are reaped as they exit (SIGCHLD ignored): no zombies. */
static int factory(int sock, char **argv) {
    static char data[REQUEST_MAX_BYTES];
    default_signals(); /* once here, so that a forked leader resets only factory_ignores */
    /* SIGCHLD: leaders are reaped as they exit; SIGINT: a Ctrl-C in the agent's terminal is the agent's to
     * handle; SIGPIPE: an agent gone is seen as a failed send */
    for (size_t i = 0; i < sizeof factory_ignores / sizeof *factory_ignores; i++) signal(factory_ignores[i], SIG_IGN);
    for (int fd = 0; fd < 3; fd++) /* a leader's streams must not land on 0-2 when received */
        if (fcntl(fd, F_GETFD) < 0) open("/dev/null", O_RDWR);
    close_from(3, sock, -1);
    if (chdir("/") < 0) return 1;
    for (;;) {
        union {
            struct cmsghdr align;
            char space[CMSG_SPACE(sizeof(int) * LEADER_FDS)];
        } control;
        struct iovec vector = {data, sizeof data};
        struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.space,
                                 .msg_controllen = sizeof control.space};
        ssize_t got = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return 0; /* the agent is gone */
        int fds[LEADER_FDS], nfds = 0;
        for (struct cmsghdr *part = CMSG_FIRSTHDR(&message); part; part = CMSG_NXTHDR(&message, part)) {
            if (part->cmsg_level != SOL_SOCKET || part->cmsg_type != SCM_RIGHTS) continue;
            int *received = (int *)CMSG_DATA(part);
            for (size_t i = 0; i < (part->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                if (nfds < LEADER_FDS) fds[nfds] = received[i];
                else close(received[i]);
                nfds++;
            }
        }
        int kept = nfds < LEADER_FDS ? nfds : LEADER_FDS;
        if (message.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) nfds = -1; /* more than a leader takes */
        struct buffer answer = {0};
        spawn_leader(data, (size_t)got, fds, nfds, argv, &answer);
        for (int i = 0; i < kept; i++) close(fds[i]);
        int sent = send(sock, answer.data, answer.len, MSG_NOSIGNAL) >= 0;
        free(answer.data);
        if (!sent) return 0;
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], FACTORY_FLAG) == 0) return factory(atoi(argv[2]), argv);
    if (argc < 3) {
        fprintf(stderr,
                "usage: %s " FACTORY_FLAG " SOCKET_FD (the agent's leader factory)\n"
                "       %s SPEC_FD REPLY_FD [CGROUP_PROCS ...] (one task's leader)\n",
                argv[0], argv[0]);
        return 2;
    }
    default_signals();
    return lead(atoi(argv[1]), atoi(argv[2]), argc - 3, argv + 3, argv[0]);
}

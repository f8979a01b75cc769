/*
 * airlock's native confine step: what src/runtime/sandbox/step.ts does in
 * its confine form, as a freestanding static program (no libc, no
 * allocator, no runtime start), so that a sandboxed start costs an execve
 * instead of a second Deno or Bun start.
 *
 * In order: change to the worker's directory, drop every capability (the
 * bounding set too when run as root), set no-new-privileges, apply the
 * Landlock ruleset, build the worker's environment, install the seccomp
 * filter, close the descriptors above stderr, and execve the worker. Any
 * failure exits with 126 (CONFINE_FAILED_EXIT_CODE) after one line
 * "airlock confine: ..." on stderr naming what failed and the errno: the
 * worker never runs unconfined.
 *
 * The spec comes as argv (encoded by src/runtime/sandbox/native_step.ts;
 * each item a C string, so no length can lie):
 *
 *   airlock-confine/1  [--pdeathsig]  CWD  LANDLOCK  N  (ACCESS,FLAGS PATH){N}
 *   M  (PORT,ACCESS){M}  SECCOMP  K  (NAME=VALUE | NAME){K}  --  ARGV...
 *
 * --pdeathsig (first, before anything else is done): the worker gets
 * SIGKILL when its parent dies (PR_SET_PDEATHSIG), as `setpriv --pdeathsig
 * KILL` would give it, and the parent must still be the one that started
 * it: a parent outside the step's pid namespace (bubblewrap, around a
 * worker that joined the shared one), so getppid() is 0. A parent that died
 * before the prctl left the step to the namespace's init (getppid() is
 * then that init's pid): the step exits at once. The signal survives the
 * execve: it is cleared only by an exec that changes credentials (a
 * set-user-ID or file-capability program), which no-new-privileges, set
 * below, rules out for the worker and anything it runs.
 *
 * LANDLOCK is "-" (none) or "ABI,HANDLED_FS,HANDLED_NET,SCOPED"; FLAGS is
 * 1 (exact: opened without following links) | 2 (required: missing is an
 * error); SECCOMP is "-" or the filter's sock_filter bytes in hex; the K
 * items are the environment changes (a value sets, a bare name removes).
 * Numbers are decimal. "--probe" alone prints what the kernel offers, as
 * the runtime step's probe does.
 *
 * Build: scripts/build_native_confine.sh (reproducible; a test rebuilds and
 * compares the bytes).
 */

typedef unsigned long u64;
typedef long i64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#if defined(__x86_64__)
#define SYS_write 1
#define SYS_close 3
#define SYS_mmap 9
#define SYS_execve 59
#define SYS_chdir 80
#define SYS_geteuid 107
#define SYS_capset 126
#define SYS_prctl 157
#define SYS_exit_group 231
#define SYS_openat 257
#define SYS_getppid 110
#elif defined(__aarch64__)
#define SYS_write 64
#define SYS_close 57
#define SYS_mmap 222
#define SYS_execve 221
#define SYS_chdir 49
#define SYS_geteuid 175
#define SYS_capset 91
#define SYS_prctl 167
#define SYS_exit_group 94
#define SYS_openat 56
#define SYS_getppid 173
#else
#error "airlock's native confine step knows x86_64 and aarch64 only"
#endif
/* The same number on every architecture (the generic table). */
#define SYS_close_range 436
#define SYS_openat2 437
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446

#define EXIT_FAILED 126
#define AT_FDCWD (-100)
#define O_PATH 010000000
#define O_CLOEXEC 02000000
#define RESOLVE_NO_SYMLINKS 0x04
#define ENOENT 2
#define EACCES 13
#define ENOTDIR 20
#define EINVAL 22
#define ENOEXEC 8
#define ENOSYS 38
#define ELOOP 40
#define EOPNOTSUPP 95
#define ESTALE 116
#define ENODEV 19
#define ETIMEDOUT 110
#define PR_SET_PDEATHSIG 1
#define SIGKILL 9
#define ESRCH 3
#define PR_SET_NO_NEW_PRIVS 38
#define PR_SET_SECCOMP 22
#define PR_GET_SECCOMP 21
#define PR_CAPBSET_READ 23
#define PR_CAPBSET_DROP 24
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#define SECCOMP_MODE_FILTER 2
#define LINUX_CAPABILITY_VERSION_3 0x20080522
#define LAST_CAPABILITY 63
#define CAP_SETPCAP 8
#define LANDLOCK_CREATE_RULESET_VERSION 1
#define LANDLOCK_RULE_PATH_BENEATH 1
#define LANDLOCK_RULE_NET_PORT 2
/* EXECUTE, WRITE_FILE, READ_FILE, TRUNCATE, IOCTL_DEV: spec.ts's LANDLOCK_ACCESS_FILE. */
#define ACCESS_FILE ((1UL << 0) | (1UL << 1) | (1UL << 2) | (1UL << 14) | (1UL << 15))
#define PROT_READ 1
#define PROT_WRITE 2
#define MAP_PRIVATE 2
#define MAP_ANONYMOUS 0x20
#define PATH_BYTES 4096
#define MESSAGE_BYTES 16384

#define HELD_PREFIX "AIRLOCK_CONFINE_HELD_"
#define HELD_PREFIX_LENGTH (sizeof(HELD_PREFIX) - 1)
#define SPEC_MAGIC "airlock-confine/1"

/* Raw system calls: the return value is -errno on failure, as the kernel gives it. */
static i64 sys6(i64 nr, u64 a, u64 b, u64 c, u64 d, u64 e, u64 f) {
#if defined(__x86_64__)
  register u64 r10 __asm__("r10") = d;
  register u64 r8 __asm__("r8") = e;
  register u64 r9 __asm__("r9") = f;
  i64 ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#else
  register u64 x8 __asm__("x8") = (u64)nr;
  register u64 x0 __asm__("x0") = a;
  register u64 x1 __asm__("x1") = b;
  register u64 x2 __asm__("x2") = c;
  register u64 x3 __asm__("x3") = d;
  register u64 x4 __asm__("x4") = e;
  register u64 x5 __asm__("x5") = f;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory");
  return (i64)x0;
#endif
}

#define sys(nr, a, b, c, d) sys6((nr), (u64)(a), (u64)(b), (u64)(c), (u64)(d), 0, 0)

/* gcc may emit calls to these even in a freestanding build (struct copies). */
void *memset(void *to, int byte, u64 length) {
  u8 *out = to;
  while (length-- > 0) *out++ = (u8)byte;
  return to;
}

void *memcpy(void *to, const void *from, u64 length) {
  u8 *out = to;
  const u8 *in = from;
  while (length-- > 0) *out++ = *in++;
  return to;
}

static u64 length_of(const char *text) {
  u64 length = 0;
  while (text[length] != 0) length++;
  return length;
}

static int starts_with(const char *text, const char *prefix, u64 prefix_length) {
  for (u64 index = 0; index < prefix_length; index++) {
    if (text[index] != prefix[index]) return 0;
  }
  return 1;
}

static int equal(const char *a, const char *b) {
  while (*a != 0 && *a == *b) a++, b++;
  return *a == *b;
}

/* The one message buffer: text is appended, bounded, then written once. */
static char message[MESSAGE_BYTES];
static u64 message_length;

static void say(const char *text) {
  while (*text != 0 && message_length < MESSAGE_BYTES - 2) message[message_length++] = *text++;
}

static void say_number(u64 value) {
  char digits[24];
  int count = 0;
  do digits[count++] = (char)('0' + value % 10), value /= 10;
  while (value > 0);
  while (count > 0 && message_length < MESSAGE_BYTES - 2) message[message_length++] = digits[--count];
}

/* A string quoted as JSON.stringify quotes it, so messages read as step.ts's. */
static void say_quoted(const char *text) {
  static const char hex[] = "0123456789abcdef";
  say("\"");
  for (; *text != 0; text++) {
    u8 byte = (u8)*text;
    char escape[7] = {0};
    if (byte == '"' || byte == '\\') escape[0] = '\\', escape[1] = (char)byte;
    else if (byte == '\b') escape[0] = '\\', escape[1] = 'b';
    else if (byte == '\f') escape[0] = '\\', escape[1] = 'f';
    else if (byte == '\n') escape[0] = '\\', escape[1] = 'n';
    else if (byte == '\r') escape[0] = '\\', escape[1] = 'r';
    else if (byte == '\t') escape[0] = '\\', escape[1] = 't';
    else if (byte < 0x20) {
      escape[0] = '\\', escape[1] = 'u', escape[2] = '0', escape[3] = '0';
      escape[4] = hex[byte >> 4], escape[5] = hex[byte & 15];
    } else escape[0] = (char)byte;
    say(escape);
  }
  say("\"");
}

/* Ends the step: the message so far, " (errno N)" when there is one, exit 126. */
static __attribute__((noreturn)) void fail(i64 error) {
  static const char prefix[] = "airlock confine: ";
  if (error < 0) error = -error;
  if (error > 0) say(" (errno "), say_number((u64)error), say(")");
  message[message_length++] = '\n';
  sys(SYS_write, 2, prefix, sizeof(prefix) - 1, 0);
  sys(SYS_write, 2, message, message_length, 0);
  for (;;) sys(SYS_exit_group, EXIT_FAILED, 0, 0, 0);
}

static __attribute__((noreturn)) void invalid(const char *what) {
  say("Invalid confine spec: ");
  say(what);
  fail(0);
}

/* A decimal natural number that fits in 64 bits, or an invalid spec. */
static u64 number(const char *text, const char *what) {
  u64 value = 0;
  if (*text == 0) invalid(what);
  for (; *text != 0; text++) {
    if (*text < '0' || *text > '9') invalid(what);
    u64 digit = (u64)(*text - '0');
    if (value > (~0UL - digit) / 10) invalid(what);
    value = value * 10 + digit;
  }
  return value;
}

/* Reads "A,B,..." as exactly `count` numbers, leaving the text as it is. */
static void numbers(const char *text, u64 *out, int count, const char *what) {
  const char *whole = text;
  char digits[24];
  for (int index = 0; index < count; index++) {
    u64 length = 0;
    while (text[length] != 0 && text[length] != ',') {
      if (length >= sizeof(digits) - 1) invalid(what);
      digits[length] = text[length];
      length++;
    }
    if ((text[length] == ',') != (index < count - 1) || length == 0) {
      say("Invalid confine spec: ");
      say(what);
      say(": ");
      say_quoted(whole);
      fail(0);
    }
    digits[length] = 0;
    out[index] = number(digits, what);
    text += length + 1;
  }
}

/* The argv items of the spec, taken in order with bounds checks. */
struct cursor {
  char **items;
  u64 count;
  u64 next;
};

static char *take(struct cursor *spec, const char *what) {
  if (spec->next >= spec->count || spec->items[spec->next] == 0) invalid(what);
  return spec->items[spec->next++];
}

static i64 landlock_abi(void) {
  i64 version = sys(SYS_landlock_create_ruleset, 0, 0, LANDLOCK_CREATE_RULESET_VERSION, 0);
  if (version >= 0) return version;
  if (version == -ENOSYS || version == -EOPNOTSUPP) return 0;
  say("cannot ask the kernel for its Landlock ABI");
  fail(version);
}

struct open_how {
  u64 flags;
  u64 mode;
  u64 resolve;
};

/* A grant's O_PATH descriptor, opened without following any link (step.ts's openNoLinks). */
static i64 open_no_links(const char *path) {
  struct open_how how = {O_PATH | O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS};
  i64 fd = sys(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
  if (fd >= 0 || fd == -ENOENT || fd == -ENOTDIR) return fd;
  say("the grant ");
  say_quoted(path);
  if (fd == -ELOOP) {
    say(" is a link or lies under one now, which it was not when the parent checked it (a worker may have swapped it); grant its real path");
  } else if (fd == -ENOSYS) {
    say(" cannot be opened without following links: the kernel has no openat2 (Linux 5.6 or later)");
  } else {
    message_length = 0;
    say("cannot open the grant ");
    say_quoted(path);
  }
  fail(fd);
}

static int hex_digit(char c);

/* The spec, checked whole before anything is done (as step.ts decodes it first). */
struct spec {
  int pdeathsig;       /* whether --pdeathsig came first */
  char *cwd;
  int landlock;        /* whether there is a ruleset */
  u64 head[4];         /* abi, handled_access_fs, handled_access_net, scoped */
  char **paths;        /* path rules: ACCESS,FLAGS then PATH */
  u64 path_count;
  char **ports;        /* port rules: PORT,ACCESS */
  u64 port_count;
  char *seccomp;       /* hex, or 0 for none */
  char **changes;      /* NAME=VALUE or NAME */
  u64 change_count;
  char *net_socket;    /* the relay's socket, or 0: no forwarded network */
  char **net_items;    /* FAMILY,HEX,PORT per listener */
  u64 net_count;
  char **command;
};

/* The optional "net SOCKET N (FAMILY,HEX,PORT){N}" before "--": the listeners to hand over. */
static void parse_net(struct cursor *in, struct spec *out) {
  out->net_socket = 0;
  out->net_count = 0;
  if (in->next >= in->count || !equal(in->items[in->next], "net")) return;
  in->next++;
  out->net_socket = take(in, "no net socket");
  if (out->net_socket[0] != '/') invalid("the net socket is not an absolute path");
  out->net_count = number(take(in, "no net listener count"), "the net listener count is not a number");
  if (out->net_count == 0 || out->net_count > 64 || out->net_count > in->count - in->next) invalid("a net listener count out of range");
  out->net_items = in->items + in->next;
  in->next += out->net_count;
}

static void parse(struct cursor *in, struct spec *out) {
  u64 pair[2];
  if (!equal(take(in, "no version"), SPEC_MAGIC)) invalid("not version 1 (" SPEC_MAGIC ")");
  out->cwd = take(in, "no cwd");
  out->pdeathsig = equal(out->cwd, "--pdeathsig");
  if (out->pdeathsig) out->cwd = take(in, "no cwd");
  if (out->cwd[0] != '/') invalid("cwd is not an absolute path");
  char *landlock = take(in, "no landlock");
  out->landlock = !equal(landlock, "-");
  if (out->landlock) numbers(landlock, out->head, 4, "landlock is not ABI,handledFs,handledNet,scoped");
  out->path_count = number(take(in, "no path rule count"), "the path rule count is not a number");
  if (out->path_count > (in->count - in->next) / 2) invalid("fewer path rules than counted");
  out->paths = in->items + in->next;
  for (u64 index = 0; index < out->path_count; index++) {
    numbers(take(in, "no path rule"), pair, 2, "a path rule is not ACCESS,FLAGS");
    if (take(in, "no path rule")[0] != '/') invalid("a path rule's path is not absolute");
  }
  out->port_count = number(take(in, "no port rule count"), "the port rule count is not a number");
  if (out->port_count > in->count - in->next) invalid("fewer port rules than counted");
  out->ports = in->items + in->next;
  for (u64 index = 0; index < out->port_count; index++) {
    numbers(take(in, "no port rule"), pair, 2, "a port rule is not PORT,ACCESS");
    if (pair[0] > 65535) invalid("a port rule's port is above 65535");
  }
  if (!out->landlock && (out->path_count != 0 || out->port_count != 0)) invalid("rules without a ruleset");
  char *seccomp = take(in, "no seccomp");
  out->seccomp = equal(seccomp, "-") ? 0 : seccomp;
  if (out->seccomp != 0) {
    u64 length = length_of(seccomp);
    if (length % 2 != 0) invalid("seccomp is not hex");
    for (u64 index = 0; index < length; index++) {
      if (hex_digit(seccomp[index]) < 0) invalid("seccomp is not hex");
    }
  }
  out->change_count = number(take(in, "no change count"), "the change count is not a number");
  if (out->change_count > in->count - in->next) invalid("fewer changes than counted");
  out->changes = in->items + in->next;
  for (u64 index = 0; index < out->change_count; index++) {
    char *change = take(in, "no change");
    if (change[0] == 0 || change[0] == '=') invalid("a change has no name");
  }
  parse_net(in, out);
  if (!equal(take(in, "no \"--\" before the command"), "--")) invalid("no \"--\" before the command");
  if (in->next >= in->count) invalid("argv is not a non-empty list of strings");
  out->command = in->items + in->next;
}

/* Applies the ruleset (step.ts's applyLandlock). */
static void apply_landlock(const struct spec *spec) {
  u64 wanted = spec->head[0];
  i64 abi = landlock_abi();
  if ((u64)abi < wanted) {
    say("the kernel's Landlock ABI is ");
    say_number((u64)abi);
    say(", the ruleset needs ");
    say_number(wanted);
    fail(0);
  }
  u64 attr[3] = {spec->head[1], spec->head[2], spec->head[3]};
  u64 size = wanted >= 6 ? 24 : wanted >= 4 ? 16 : 8;
  i64 ruleset = sys(SYS_landlock_create_ruleset, attr, size, 0, 0);
  if (ruleset < 0) say("cannot create the Landlock ruleset"), fail(ruleset);
  for (u64 index = 0; index < spec->path_count; index++) {
    u64 rule[2];
    numbers(spec->paths[index * 2], rule, 2, "a path rule is not ACCESS,FLAGS");
    char *path = spec->paths[index * 2 + 1];
    u64 access = rule[0];
    if (access == 0) continue;
    i64 fd;
    if (rule[1] & 1) {
      fd = open_no_links(path);
      if (fd < 0) {
        if (!(rule[1] & 2)) continue;
        say("the grant ");
        say_quoted(path);
        say(" is gone, which it was not when the parent checked it (a worker may have moved it)");
        fail(fd);
      }
    } else {
      fd = sys(SYS_openat, AT_FDCWD, path, O_PATH | O_CLOEXEC, 0);
      if (fd == -ENOENT || fd == -ENOTDIR) continue;
      if (fd < 0) say("cannot open "), say_quoted(path), fail(fd);
    }
    /* struct landlock_path_beneath_attr is packed: u64 allowed_access, s32 parent_fd. */
    u8 beneath[12];
    for (;;) {
      memcpy(beneath, &access, 8);
      int parent = (int)fd;
      memcpy(beneath + 8, &parent, 4);
      i64 added = sys(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, beneath, 0);
      if (added == 0) break;
      /* A file (not a directory) takes only the rights that apply to files. */
      if (added == -EINVAL && (access & ~ACCESS_FILE) != 0) {
        access &= ACCESS_FILE;
        if (access != 0) continue;
        break;
      }
      say("cannot add the Landlock rule for ");
      say_quoted(path);
      fail(added);
    }
    sys(SYS_close, fd, 0, 0, 0);
  }
  for (u64 index = 0; index < spec->port_count; index++) {
    u64 rule[2];
    numbers(spec->ports[index], rule, 2, "a port rule is not PORT,ACCESS");
    u64 port_attr[2] = {rule[1], rule[0]};
    i64 added = sys(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_NET_PORT, port_attr, 0);
    if (added != 0) {
      say("cannot add the Landlock rule for TCP port ");
      say_number(rule[0]);
      fail(added);
    }
  }
  i64 restricted = sys(SYS_landlock_restrict_self, ruleset, 0, 0, 0);
  if (restricted != 0) say("cannot apply the Landlock ruleset"), fail(restricted);
  sys(SYS_close, ruleset, 0, 0, 0);
}

struct cap_header {
  u32 version;
  int pid;
};

struct cap_data {
  u32 effective, permitted, inheritable;
};

/* Clears the ambient, inheritable, permitted and effective sets (step.ts's clearCapabilities). */
static void clear_capabilities(void) {
  sys(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0);
  struct cap_header header = {LINUX_CAPABILITY_VERSION_3, 0};
  struct cap_data data[2] = {{0, 0, 0}, {0, 0, 0}};
  i64 result = sys(SYS_capset, &header, data, 0, 0);
  if (result != 0) say("cannot clear the capability sets"), fail(result);
}

/* Drops the bounding set (CAP_SETPCAP last: dropping needs it), then every set. */
static void drop_capabilities(void) {
  for (int step = 0; step <= LAST_CAPABILITY; step++) {
    int cap = step < CAP_SETPCAP ? step : step < LAST_CAPABILITY ? step + 1 : CAP_SETPCAP;
    i64 has = sys(SYS_prctl, PR_CAPBSET_READ, cap, 0, 0);
    if (has < 0) continue; /* past the last capability this kernel knows */
    if (has == 1) {
      i64 dropped = sys(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0);
      if (dropped != 0) {
        say("cannot drop capability ");
        say_number((u64)cap);
        say(" from the bounding set");
        fail(dropped);
      }
    }
  }
  clear_capabilities();
}

/* Memory for the environment's pointers, sized to this start (there is no allocator). */
static char **pointers(u64 count) {
  i64 at = sys6(SYS_mmap, 0, count * sizeof(char *), PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, (u64)-1, 0);
  if (at < 0 && at > -4096) say("cannot allocate the environment"), fail(at);
  return (char **)at;
}

/* The name part of an entry, "=" included (the whole entry when it has none): step.ts's nameOf. */
static u64 name_length(const char *entry) {
  u64 length = 0;
  while (entry[length] != 0 && entry[length] != '=') length++;
  /* Without "=", the NUL too: only an entry of exactly that text matches. */
  return length + 1;
}

/* Whether `entry` starts with "<name>=", for a change given as NAME or NAME=VALUE. */
static int names(const char *entry, const char *change) {
  u64 length = 0;
  while (change[length] != 0 && change[length] != '=') length++;
  return starts_with(entry, change, length) && entry[length] == '=';
}

/*
 * The worker's environment (step.ts's environEntries, to the byte): every
 * held variable gets its name back and wins over an entry of the same name;
 * the step's own entries stay unless a change names them; then each change
 * with a value is added unless a held variable has its name.
 */
static char **environment(char **envp, char **changes, u64 change_count) {
  u64 count = 0;
  while (envp[count] != 0) count++;
  char **out = pointers(count + change_count + 1);
  u64 kept = 0;
  for (u64 index = 0; index < count; index++) {
    if (starts_with(envp[index], HELD_PREFIX, HELD_PREFIX_LENGTH) && envp[index][0] != 0) {
      out[kept++] = envp[index] + HELD_PREFIX_LENGTH;
    }
  }
  u64 restored = kept;
  for (u64 index = 0; index < count; index++) {
    char *entry = envp[index];
    if (entry[0] == 0 || starts_with(entry, HELD_PREFIX, HELD_PREFIX_LENGTH)) continue;
    int drop = 0;
    for (u64 change = 0; change < change_count && !drop; change++) drop = names(entry, changes[change]);
    for (u64 held = 0; held < restored && !drop; held++) {
      drop = starts_with(entry, out[held], name_length(out[held]));
    }
    if (!drop) out[kept++] = entry;
  }
  for (u64 change = 0; change < change_count; change++) {
    char *item = changes[change];
    u64 name = 0;
    while (item[name] != 0 && item[name] != '=') name++;
    if (item[name] != '=') continue; /* a removal */
    int held = 0;
    for (u64 index = 0; index < restored && !held; index++) {
      held = starts_with(out[index], item, name + 1);
    }
    if (!held) out[kept++] = item;
  }
  out[kept] = 0;
  return out;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

struct sock_fprog {
  u16 len;
  void *filter;
};

/* Decodes the filter in place (its hex text is twice as long) and installs it. */
static void install_seccomp(char *text) {
  u64 bytes = length_of(text) / 2;
  u8 *program = (u8 *)text;
  for (u64 index = 0; index < bytes; index++) {
    program[index] = (u8)(hex_digit(text[index * 2]) * 16 + hex_digit(text[index * 2 + 1]));
  }
  if (bytes == 0 || bytes % 8 != 0 || bytes / 8 > 0xffff) {
    say("the seccomp program is empty or truncated");
    fail(0);
  }
  struct sock_fprog fprog = {(u16)(bytes / 8), program};
  i64 result = sys(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0);
  if (result != 0) say("cannot install the seccomp filter"), fail(result);
}

static char *lookup(char **envp, const char *name) {
  u64 length = length_of(name);
  for (; *envp != 0; envp++) {
    if (starts_with(*envp, name, length) && (*envp)[length] == '=') return *envp + length + 1;
  }
  return 0;
}

/*
 * execvpe as glibc does it: a name with a slash is run as is; otherwise
 * each directory of the step's own PATH (glibc's default without one), a
 * script without #! run by /bin/sh. Returns the errno when nothing ran.
 */
static i64 exec_program(char **argv, char **envp, char **own) {
  const char *file = argv[0];
  i64 result;
  int slash = 0;
  for (const char *at = file; *at != 0; at++) slash |= *at == '/';
  if (slash) {
    result = sys(SYS_execve, file, argv, envp, 0);
    if (result == -ENOEXEC) goto script;
    return result;
  }
  const char *path = lookup(own, "PATH");
  if (path == 0) path = "/bin:/usr/bin";
  static char full[PATH_BYTES];
  u64 name = length_of(file);
  int denied = 0;
  result = -ENOENT;
  for (;;) {
    const char *end = path;
    while (*end != 0 && *end != ':') end++;
    u64 dir = (u64)(end - path);
    if (dir + 1 + name + 1 <= PATH_BYTES && name > 0) {
      memcpy(full, path, dir);
      u64 at = dir;
      if (dir > 0) full[at++] = '/';
      memcpy(full + at, file, name + 1);
      result = sys(SYS_execve, full, argv, envp, 0);
      if (result == -ENOEXEC) {
        file = full;
        goto script;
      }
      if (result == -EACCES) denied = 1;
      else if (result != -ENOENT && result != -ENOTDIR && result != -ESTALE &&
               result != -ENODEV && result != -ETIMEDOUT) {
        return result;
      }
    }
    if (*end == 0) break;
    path = end + 1;
  }
  return denied ? -EACCES : result;
script : {
  u64 count = 0;
  while (argv[count] != 0) count++;
  char **shell = pointers(count + 2);
  shell[0] = "/bin/sh";
  shell[1] = (char *)file;
  for (u64 index = 1; index <= count; index++) shell[index + 1] = argv[index];
  return sys(SYS_execve, shell[0], shell, envp, 0);
}
}

/*
 * --pdeathsig: SIGKILL when the parent dies, and the parent still the one
 * outside this pid namespace that started the step (see the header).
 */
static void die_with_parent(void) {
  i64 set = sys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0);
  if (set != 0) say("cannot set the parent-death signal"), fail(set);
  if (sys(SYS_getppid, 0, 0, 0, 0) != 0) {
    say("the parent (bubblewrap) ended before the parent-death signal was set");
    fail(-ESRCH);
  }
}

#include "relay.c"

/* --probe: what the kernel offers, as the runtime step prints it. */
static __attribute__((noreturn)) void probe(void) {
  i64 mode = sys(SYS_prctl, PR_GET_SECCOMP, 0, 0, 0);
  i64 abi = landlock_abi();
  say("{\"landlockAbi\":");
  say_number((u64)abi);
  say(mode >= 0 ? ",\"seccomp\":true}\n" : ",\"seccomp\":false}\n");
  sys(SYS_write, 1, message, message_length, 0);
  for (;;) sys(SYS_exit_group, 0, 0, 0, 0);
}

__attribute__((noreturn, used)) void confine_main(u64 *stack) {
  u64 argc = stack[0];
  char **argv = (char **)(stack + 1);
  char **envp = argv + argc + 1;
  if (argc == 2 && equal(argv[1], "--probe")) probe();
  if (argc == 2 && equal(argv[1], "--relay")) relay_main();
  struct cursor in = {argv, argc, 1};
  struct spec spec;
  parse(&in, &spec);
  if (spec.pdeathsig) die_with_parent();
  i64 changed = sys(SYS_chdir, spec.cwd, 0, 0, 0);
  if (changed != 0) say("cannot change to the directory "), say_quoted(spec.cwd), fail(changed);
  /* Before the capabilities go: a port below 1024 or an address to add needs one. */
  if (spec.net_socket != 0) net_handover(spec.net_socket, spec.net_items, spec.net_count);
  if (sys(SYS_geteuid, 0, 0, 0, 0) == 0) drop_capabilities();
  else clear_capabilities();
  i64 nnp = sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0);
  if (nnp != 0) say("cannot set no-new-privileges"), fail(nnp);
  if (spec.landlock) apply_landlock(&spec);
  /* Built before the filter: nothing allocates through a refused call after it. */
  char **worker_env = environment(envp, spec.changes, spec.change_count);
  if (spec.seccomp != 0) install_seccomp(spec.seccomp);
  /*
   * Nothing the sandbox opened reaches the worker (the pipe this program
   * came through is one): close-on-exec on every descriptor above stderr.
   */
  i64 closed = sys(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */, 0);
  if (closed != 0) say("cannot mark the inherited descriptors close-on-exec"), fail(closed);
  i64 error = exec_program(spec.command, worker_env, envp);
  say("cannot execute ");
  say_quoted(spec.command[0]);
  fail(error);
}

#if defined(__x86_64__)
__asm__(".globl _start\n"
        "_start:\n"
        "  xor %rbp, %rbp\n"
        "  mov %rsp, %rdi\n"
        "  and $-16, %rsp\n"
        "  call confine_main\n"
        "  hlt\n");
#else
__asm__(".globl _start\n"
        "_start:\n"
        "  mov x29, #0\n"
        "  mov x30, #0\n"
        "  mov x0, sp\n"
        "  bl confine_main\n"
        "  brk #0\n");
#endif

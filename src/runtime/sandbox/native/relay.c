/*
 * airlock's native network relay, and the confine step's half of it
 * (included by confine.c: one program, two roles; no libc).
 *
 * The confine step (net_handover, before it drops its capabilities) makes
 * the worker's listening TCP sockets inside the sandbox's network namespace
 * and hands them over a unix socket with SCM_RIGHTS to the relay: one
 * process per parent, outside every sandbox, started by the parent in a
 * minimal bubblewrap (`--relay`). The relay accepts on them, asks the
 * parent (over its stdin and stdout, one line each) where each connection
 * may go, connects there and splices both ways through a pipe per
 * direction: no byte passes through user space, none through JavaScript.
 * The parent keeps the policy (the grants, the name lookups, the events):
 * the relay only connects where the parent says, to an address it was
 * given, never to a name.
 *
 * Parent to relay:
 *   w W N (FAMILY HEX PORT){N}  listen for worker W's handover on "W.sock"
 *   c C N FAMILY,HEX,PORT       connect connection C there (attempt N)
 *   a C                         abandon C's connect attempt (no answer)
 *   k C                         close connection C
 *   r W                         remove worker W and all its connections
 * Relay to parent:
 *   L W | R W | E W TEXT        listening | listeners received | failed
 *   A W C INDEX                 connection C accepted on listener INDEX
 *   X W INDEX                   accepted and closed: too many open
 *   C C N | F C N ERRNO         attempt N connected | failed
 *   D C OUT IN ERRNO            closed (bytes each way, 0 or the error)
 * FAMILY is 4 or 6, HEX the address's bytes (network order).
 */

#if defined(__x86_64__)
#define SYS_read 0
#define SYS_rt_sigaction 13
#define SYS_socket 41
#define SYS_connect 42
#define SYS_sendmsg 46
#define SYS_recvmsg 47
#define SYS_shutdown 48
#define SYS_bind 49
#define SYS_listen 50
#define SYS_getsockname 51
#define SYS_setsockopt 54
#define SYS_getsockopt 55
#define SYS_fcntl 72
#define SYS_epoll_ctl 233
#define SYS_unlinkat 263
#define SYS_splice 275
#define SYS_epoll_pwait 281
#define SYS_accept4 288
#define SYS_epoll_create1 291
#define SYS_pipe2 293
#define SYS_prlimit64 302
#else
#define SYS_read 63
#define SYS_rt_sigaction 134
#define SYS_socket 198
#define SYS_connect 203
#define SYS_sendmsg 211
#define SYS_recvmsg 212
#define SYS_shutdown 210
#define SYS_bind 200
#define SYS_listen 201
#define SYS_getsockname 204
#define SYS_setsockopt 208
#define SYS_getsockopt 209
#define SYS_fcntl 25
#define SYS_epoll_ctl 21
#define SYS_unlinkat 35
#define SYS_splice 76
#define SYS_epoll_pwait 22
#define SYS_accept4 242
#define SYS_epoll_create1 20
#define SYS_pipe2 59
#define SYS_prlimit64 261
#endif

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_NONBLOCK 04000
#define SOCK_CLOEXEC 02000000
#define O_NONBLOCK 04000
#define F_SETFL 4
#define F_GETFL 3
#define SOL_SOCKET 1
#define SO_REUSEADDR 2
#define SO_TYPE 3
#define SO_ERROR 4
#define SO_ACCEPTCONN 30
#define SO_PROTOCOL 38
#define SO_DOMAIN 39
#define IPPROTO_TCP 6
#define IPPROTO_IPV6 41
#define IPV6_V6ONLY 26
#define TCP_NODELAY 1
#define SCM_RIGHTS 1
#define MSG_NOSIGNAL 0x4000
#define MSG_DONTWAIT 0x40
#define MSG_CTRUNC 0x8
#define MSG_CMSG_CLOEXEC 0x40000000
#define SHUT_WR 1
#define EPOLL_CTL_ADD 1
#define EPOLL_CTL_DEL 2
#define EPOLLIN 0x1
#define EPOLLOUT 0x4
#define EPOLLERR 0x8
#define EPOLLHUP 0x10
#define EPOLLRDHUP 0x2000
#define EPOLLET (1U << 31)
#define SPLICE_F_MOVE 1
#define SPLICE_F_NONBLOCK 2
#define EAGAIN 11
#define EINTR 4
#define EINPROGRESS 115
#define EMFILE 24
#define ENFILE 23
#define SIGPIPE 13
#define SIG_IGN 1
#define RLIMIT_NOFILE 7

/* At most this many listeners per worker (netLayout's targets and names). */
#define NET_MAX_LISTENERS 64
/* Workers of one parent with a forwarded network at once. */
#define RELAY_WORKERS 512
/* Connections of every worker together; 256 per worker (MAX_NET_CONNECTIONS). */
#define RELAY_CONNECTIONS 4096
#define RELAY_PER_WORKER 256
/* Each direction's pipe: larger than the default 64 KiB, fewer splices and wake-ups per MiB. */
#define PIPE_BYTES (1 << 18)
#define F_SETPIPE_SZ 1031
#define HANDOVER_MAGIC "airlock-net/1"

struct sockaddr_un {
  u16 family;
  char path[108];
};

struct sockaddr_in6 {
  u16 family;
  u16 port;
  u32 flowinfo;
  u8 address[16];
  u32 scope;
};

struct sockaddr_in {
  u16 family;
  u16 port;
  u8 address[4];
  u8 zero[8];
};

struct iovec {
  void *base;
  u64 length;
};

struct msghdr {
  void *name;
  u32 name_length;
  struct iovec *iov;
  u64 iov_count;
  void *control;
  u64 control_length;
  int flags;
};

struct cmsghdr {
  u64 length;
  int level;
  int type;
};

struct epoll_event {
  u32 events;
  u64 data;
}
#if defined(__x86_64__)
__attribute__((packed))
#endif
;

static u16 net_port(u64 port) { return (u16)(((port & 0xff) << 8) | ((port >> 8) & 0xff)); }

/* "4,7f500001,5432" or "6,<32 hex>,5432" as a socket address; its length, or 0 when malformed. */
static u32 net_address(const char *text, struct sockaddr_in6 *out) {
  memset(out, 0, sizeof(*out));
  u64 family = 0, port = 0;
  if (text[0] == '4') family = 4;
  else if (text[0] == '6') family = 6;
  if (family == 0 || text[1] != ',') return 0;
  text += 2;
  u64 bytes = family == 4 ? 4 : 16;
  u8 address[16];
  for (u64 index = 0; index < bytes; index++) {
    int high = hex_digit(text[index * 2]), low = high < 0 ? -1 : hex_digit(text[index * 2 + 1]);
    if (high < 0 || low < 0) return 0;
    address[index] = (u8)(high * 16 + low);
  }
  text += bytes * 2;
  if (*text++ != ',' || *text == 0) return 0;
  for (; *text != 0; text++) {
    if (*text < '0' || *text > '9') return 0;
    port = port * 10 + (u64)(*text - '0');
    if (port > 65535) return 0;
  }
  if (port == 0) return 0;
  if (family == 4) {
    struct sockaddr_in *in = (struct sockaddr_in *)out;
    in->family = AF_INET;
    in->port = net_port(port);
    memcpy(in->address, address, 4);
    return sizeof(struct sockaddr_in);
  }
  out->family = AF_INET6;
  out->port = net_port(port);
  memcpy(out->address, address, 16);
  return sizeof(struct sockaddr_in6);
}

#define AF_NETLINK 16
#define SOCK_RAW 3
#define NETLINK_ROUTE 0
#define RTM_NEWADDR 20
#define NLMSG_ERROR 2
#define NLM_F_REQUEST 1
#define NLM_F_ACK 4
#define NLM_F_EXCL 0x200
#define NLM_F_CREATE 0x400
#define IFA_ADDRESS 1
#define IFA_LOCAL 2
#define IFA_F_NODAD 0x02
#define RT_SCOPE_HOST 254
#define EEXIST 17
/* A new network namespace makes its loopback interface first: index 1. */
#define LOOPBACK_INDEX 1

/* Whether an address is on loopback as a new network namespace starts (127/8, ::1). */
static int on_loopback(const struct sockaddr_in6 *address) {
  if (address->family == AF_INET) return ((const struct sockaddr_in *)address)->address[0] == 127;
  for (int index = 0; index < 15; index++) {
    if (address->address[index] != 0) return 0;
  }
  return address->address[15] == 1;
}

/* Appends a netlink attribute (its payload 4 or 16 bytes: always aligned). */
static u64 put_attribute(u8 *at, u16 type, const u8 *data, u16 length) {
  u16 total = (u16)(4 + length);
  memcpy(at, &total, 2);
  memcpy(at + 2, &type, 2);
  memcpy(at + 4, data, length);
  return total;
}

/*
 * Gives the sandbox's loopback interface a granted address outside
 * loopback (10.0.0.5/32), so that a client connecting to it unchanged
 * reaches the listener made next instead of finding no route. Needs
 * CAP_NET_ADMIN in the sandbox's user namespace (bubblewrap adds it for
 * this step only; it goes with the others before the worker runs). An
 * address already there (two ports of one host) is fine.
 */
static void add_to_loopback(const struct sockaddr_in6 *address, const char *item) {
  int v4 = address->family == AF_INET;
  u16 bytes = v4 ? 4 : 16;
  const u8 *raw = v4 ? ((const struct sockaddr_in *)address)->address : address->address;
  u8 request[64];
  memset(request, 0, sizeof(request));
  u16 type = RTM_NEWADDR, flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE;
  u32 sequence = 1, index = LOOPBACK_INDEX;
  memcpy(request + 4, &type, 2);
  memcpy(request + 6, &flags, 2);
  memcpy(request + 8, &sequence, 4);
  /* struct ifaddrmsg: family, prefix length, flags, scope, interface index. */
  request[16] = v4 ? AF_INET : AF_INET6;
  request[17] = (u8)(bytes * 8);
  request[18] = IFA_F_NODAD; /* IPv6: usable at once, no duplicate detection */
  request[19] = RT_SCOPE_HOST;
  memcpy(request + 20, &index, 4);
  u64 length = 24;
  length += put_attribute(request + length, IFA_LOCAL, raw, bytes);
  length += put_attribute(request + length, IFA_ADDRESS, raw, bytes);
  u32 total = (u32)length;
  memcpy(request, &total, 4);
  i64 fd = sys(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE, 0);
  if (fd < 0) say("cannot open a routing socket to add "), say_quoted(item), fail(fd);
  i64 sent = sys(SYS_write, fd, request, length, 0);
  if (sent != (i64)length) say("cannot ask to add "), say_quoted(item), fail(sent < 0 ? sent : 0);
  u8 answer[256];
  i64 got = sys(SYS_read, fd, answer, sizeof(answer), 0);
  sys(SYS_close, fd, 0, 0, 0);
  u16 answer_type = 0;
  int error = 0;
  if (got >= 20) memcpy(&answer_type, answer + 4, 2), memcpy(&error, answer + 16, 4);
  if (got < 20 || answer_type != NLMSG_ERROR) {
    say("no answer from the kernel to adding "), say_quoted(item), fail(got < 0 ? got : 0);
  }
  if (error != 0 && error != -EEXIST) {
    say("cannot add the granted address "), say_quoted(item), say(" to the sandbox's loopback"), fail(error);
  }
}

/*
 * The confine step's half: one listening socket per item ("FAMILY,HEX,PORT"),
 * handed to the relay over `socket` (SCM_RIGHTS), then closed here; an
 * address outside loopback is added to the loopback interface first. Called
 * before the step drops its capabilities (a port below 1024 needs
 * CAP_NET_BIND_SERVICE, adding an address CAP_NET_ADMIN). Connections
 * made before the relay accepts wait in the sockets' backlogs.
 */
static void net_handover(const char *socket, char **items, u64 count) {
  int fds[NET_MAX_LISTENERS];
  for (u64 index = 0; index < count; index++) {
    struct sockaddr_in6 address;
    u32 length = net_address(items[index], &address);
    if (length == 0) invalid("a net listener is not FAMILY,HEX,PORT");
    if (!on_loopback(&address)) add_to_loopback(&address, items[index]);
    i64 fd = sys(SYS_socket, address.family, SOCK_STREAM | SOCK_CLOEXEC, 0, 0);
    if (fd < 0) say("cannot make a listening socket"), fail(fd);
    int one = 1;
    if (address.family == AF_INET6) sys6(SYS_setsockopt, fd, IPPROTO_IPV6, IPV6_V6ONLY, (u64)&one, 4, 0);
    sys6(SYS_setsockopt, fd, SOL_SOCKET, SO_REUSEADDR, (u64)&one, 4, 0);
    i64 done = sys(SYS_bind, fd, &address, length, 0);
    if (done == 0) done = sys(SYS_listen, fd, 4096, 0, 0);
    if (done != 0) say("cannot listen on the granted address "), say_quoted(items[index]), fail(done);
    fds[index] = (int)fd;
  }
  struct sockaddr_un broker = {AF_UNIX, {0}};
  u64 path = length_of(socket);
  if (path >= sizeof(broker.path)) invalid("the net socket's path is too long");
  memcpy(broker.path, socket, path + 1);
  i64 unix = sys(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, 0);
  if (unix < 0) say("cannot make the relay's socket"), fail(unix);
  i64 connected = sys(SYS_connect, unix, &broker, sizeof(broker), 0);
  if (connected != 0) say("cannot reach the network relay at "), say_quoted(socket), fail(connected);
  u64 control[(sizeof(struct cmsghdr) + NET_MAX_LISTENERS * sizeof(int) + 7) / 8 + 1];
  memset(control, 0, sizeof(control));
  struct cmsghdr *header = (struct cmsghdr *)control;
  header->length = sizeof(struct cmsghdr) + count * sizeof(int);
  header->level = SOL_SOCKET;
  header->type = SCM_RIGHTS;
  memcpy((u8 *)control + sizeof(struct cmsghdr), fds, count * sizeof(int));
  struct iovec data = {HANDOVER_MAGIC "\n", sizeof(HANDOVER_MAGIC)};
  struct msghdr message = {0, 0, &data, 1, control, (header->length + 7) & ~7UL, 0};
  i64 sent = sys(SYS_sendmsg, unix, &message, MSG_NOSIGNAL, 0);
  if (sent != (i64)sizeof(HANDOVER_MAGIC)) say("cannot hand the listeners to the network relay"), fail(sent < 0 ? sent : 0);
  sys(SYS_close, unix, 0, 0, 0);
  for (u64 index = 0; index < count; index++) sys(SYS_close, fds[index], 0, 0, 0);
}

/* ---- the relay ---- */

enum { KIND_INPUT = 1, KIND_HANDOVER_LISTEN, KIND_HANDOVER, KIND_LISTENER, KIND_CLIENT, KIND_UPSTREAM };
enum { FREE = 0, WAITING, CONNECTING, RELAYING };

struct relay_worker {
  u64 id;
  int used;
  int handover_listen; /* the unix listener, until the handover */
  int handover;        /* the accepted handover connection, until its message */
  u64 count;
  struct sockaddr_in6 expected[NET_MAX_LISTENERS];
  int listeners[NET_MAX_LISTENERS];
  u64 open;
};

struct relay_direction {
  int from, to;    /* descriptors (the connection's) */
  int pipe[2];
  u64 pending;     /* bytes in the pipe */
  u64 moved;       /* bytes written to `to` */
  int ended;       /* `from` reached its end */
  int shut;        /* `to` was half-closed */
};

struct relay_connection {
  int state;
  u64 id;
  u64 worker; /* index */
  u64 attempt; /* the parent's number for the connect in progress */
  int client, upstream;
  struct relay_direction out, in; /* client to upstream, upstream to client */
};

static struct relay_worker workers[RELAY_WORKERS];
static struct relay_connection connections[RELAY_CONNECTIONS];
static u64 generations[RELAY_CONNECTIONS];
static int relay_epoll;
static int accept_paused; /* out of descriptors: listeners wait for a close */

static void relay_say(void) {
  message[message_length++] = '\n';
  u64 at = 0;
  while (at < message_length) {
    i64 n = sys(SYS_write, 1, message + at, message_length - at, 0);
    if (n == -EINTR) continue;
    if (n <= 0) for (;;) sys(SYS_exit_group, 0, 0, 0, 0); /* the parent is gone */
    at += (u64)n;
  }
  message_length = 0;
}

/* An event's data: the kind, and an index or a connection's id (its generation with it). */
static void watch(int fd, u32 events, int kind, u64 index) {
  struct epoll_event event = {events, ((u64)kind << 56) | index};
  sys(SYS_epoll_ctl, relay_epoll, EPOLL_CTL_ADD, fd, &event);
}

static void close_fd(int *fd) {
  if (*fd >= 0) sys(SYS_close, *fd, 0, 0, 0);
  *fd = -1;
}

static struct relay_worker *worker_by_id(u64 id) {
  for (u64 index = 0; index < RELAY_WORKERS; index++) {
    if (workers[index].used && workers[index].id == id) return &workers[index];
  }
  return 0;
}

static struct relay_connection *connection_by_id(u64 id) {
  struct relay_connection *conn = &connections[id % RELAY_CONNECTIONS];
  return conn->state != FREE && conn->id == id ? conn : 0;
}

static void close_connection(struct relay_connection *conn, i64 error) {
  close_fd(&conn->client);
  close_fd(&conn->upstream);
  close_fd(&conn->out.pipe[0]);
  close_fd(&conn->out.pipe[1]);
  close_fd(&conn->in.pipe[0]);
  close_fd(&conn->in.pipe[1]);
  say("D "), say_number(conn->id), say(" "), say_number(conn->out.moved), say(" ");
  say_number(conn->in.moved), say(" "), say_number((u64)(error < 0 ? -error : error));
  relay_say();
  workers[conn->worker].open--;
  conn->state = FREE;
  if (accept_paused) {
    accept_paused = 0;
    for (u64 w = 0; w < RELAY_WORKERS; w++) {
      if (!workers[w].used) continue;
      for (u64 l = 0; l < workers[w].count; l++) {
        if (workers[w].listeners[l] >= 0) watch(workers[w].listeners[l], EPOLLIN, KIND_LISTENER, w * NET_MAX_LISTENERS + l);
      }
    }
  }
}

static void remove_worker(struct relay_worker *worker) {
  u64 index = (u64)(worker - workers);
  for (u64 c = 0; c < RELAY_CONNECTIONS; c++) {
    if (connections[c].state != FREE && connections[c].worker == index) close_connection(&connections[c], 0);
  }
  close_fd(&worker->handover_listen);
  close_fd(&worker->handover);
  for (u64 l = 0; l < worker->count; l++) close_fd(&worker->listeners[l]);
  char name[32];
  message_length = 0;
  say_number(worker->id), say(".sock");
  memcpy(name, message, message_length), name[message_length] = 0;
  message_length = 0;
  sys(SYS_unlinkat, AT_FDCWD, name, 0, 0);
  worker->used = 0;
}

/* Moves what it can one way; 1 when this direction is done, -errno on an error. */
static i64 pump_direction(struct relay_direction *d) {
  for (;;) {
    while (d->pending > 0) {
      i64 n = sys6(SYS_splice, d->pipe[0], 0, d->to, 0, d->pending, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n == -EAGAIN) return 0;
      if (n == -EINTR) continue;
      if (n <= 0) return n < 0 ? n : -32;
      d->pending -= (u64)n;
      d->moved += (u64)n;
    }
    if (d->ended) {
      if (!d->shut) d->shut = 1, sys(SYS_shutdown, d->to, SHUT_WR, 0, 0);
      return 1;
    }
    i64 n = sys6(SYS_splice, d->from, 0, d->pipe[1], 0, PIPE_BYTES, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n == -EAGAIN) return 0;
    if (n == -EINTR) continue;
    if (n < 0) return n;
    if (n == 0) d->ended = 1;
    d->pending += (u64)n;
  }
}

static void pump_connection(struct relay_connection *conn) {
  i64 out = pump_direction(&conn->out);
  i64 in = out < 0 ? 0 : pump_direction(&conn->in);
  if (out < 0 || in < 0) close_connection(conn, out < 0 ? out : in);
  else if (out == 1 && in == 1) close_connection(conn, 0);
}

static void start_relaying(struct relay_connection *conn) {
  i64 made = sys(SYS_pipe2, conn->out.pipe, O_NONBLOCK | O_CLOEXEC, 0, 0);
  if (made == 0) made = sys(SYS_pipe2, conn->in.pipe, O_NONBLOCK | O_CLOEXEC, 0, 0);
  if (made != 0) {
    close_connection(conn, made);
    return;
  }
  /* Best effort: past the user's pipe budget the kernel keeps the default. */
  sys(SYS_fcntl, conn->out.pipe[1], F_SETPIPE_SZ, PIPE_BYTES, 0);
  sys(SYS_fcntl, conn->in.pipe[1], F_SETPIPE_SZ, PIPE_BYTES, 0);
  conn->state = RELAYING;
  conn->out.from = conn->client, conn->out.to = conn->upstream;
  conn->in.from = conn->upstream, conn->in.to = conn->client;
  say("C "), say_number(conn->id), say(" "), say_number(conn->attempt), relay_say();
  watch(conn->client, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, KIND_CLIENT, conn->id);
  pump_connection(conn);
}

static void connecting(struct relay_connection *conn) {
  int error = 0;
  u32 length = sizeof(error);
  sys6(SYS_getsockopt, conn->upstream, SOL_SOCKET, SO_ERROR, (u64)&error, (u64)&length, 0);
  if (error == 0) {
    start_relaying(conn);
    return;
  }
  sys(SYS_epoll_ctl, relay_epoll, EPOLL_CTL_DEL, conn->upstream, 0);
  close_fd(&conn->upstream);
  conn->state = WAITING;
  say("F "), say_number(conn->id), say(" "), say_number(conn->attempt), say(" "), say_number((u64)error), relay_say();
}

static void connect_failed(struct relay_connection *conn, u64 attempt, i64 error) {
  say("F "), say_number(conn->id), say(" "), say_number(attempt), say(" "), say_number((u64)(error < 0 ? -error : error));
  relay_say();
}

static void connect_to(struct relay_connection *conn, u64 attempt, const char *address_text) {
  struct sockaddr_in6 address;
  u32 length = net_address(address_text, &address);
  if (conn->state != WAITING || length == 0) {
    connect_failed(conn, attempt, EINVAL);
    return;
  }
  i64 fd = sys(SYS_socket, address.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, 0);
  if (fd < 0) {
    connect_failed(conn, attempt, fd);
    return;
  }
  conn->attempt = attempt;
  int one = 1;
  sys6(SYS_setsockopt, fd, IPPROTO_TCP, TCP_NODELAY, (u64)&one, 4, 0);
  conn->upstream = (int)fd;
  conn->state = CONNECTING;
  i64 result = sys(SYS_connect, fd, &address, length, 0);
  if (result != 0 && result != -EINPROGRESS) {
    close_fd(&conn->upstream);
    conn->state = WAITING;
    connect_failed(conn, attempt, result);
    return;
  }
  watch(conn->upstream, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, KIND_UPSTREAM, conn->id);
}

static void accept_on(u64 worker_index, u64 listener) {
  struct relay_worker *worker = &workers[worker_index];
  for (;;) {
    i64 fd = sys(SYS_accept4, worker->listeners[listener], 0, 0, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd == -EAGAIN) return;
    if (fd == -EINTR) continue;
    if (fd == -EMFILE || fd == -ENFILE) {
      /* Until a connection closes: listening would spin on the readable listener. */
      accept_paused = 1;
      for (u64 w = 0; w < RELAY_WORKERS; w++) {
        for (u64 l = 0; workers[w].used && l < workers[w].count; l++) {
          if (workers[w].listeners[l] >= 0) sys(SYS_epoll_ctl, relay_epoll, EPOLL_CTL_DEL, workers[w].listeners[l], 0);
        }
      }
      return;
    }
    if (fd < 0) return;
    u64 slot = RELAY_CONNECTIONS;
    if (worker->open < RELAY_PER_WORKER) {
      for (u64 c = 0; c < RELAY_CONNECTIONS && slot == RELAY_CONNECTIONS; c++) {
        if (connections[c].state == FREE) slot = c;
      }
    }
    if (slot == RELAY_CONNECTIONS) {
      sys(SYS_close, fd, 0, 0, 0);
      say("X "), say_number(worker->id), say(" "), say_number(listener), relay_say();
      continue;
    }
    struct relay_connection *conn = &connections[slot];
    memset(conn, 0, sizeof(*conn));
    conn->id = slot + RELAY_CONNECTIONS * ++generations[slot];
    conn->state = WAITING;
    conn->worker = worker_index;
    conn->client = (int)fd;
    conn->upstream = -1;
    conn->out.pipe[0] = conn->out.pipe[1] = conn->in.pipe[0] = conn->in.pipe[1] = -1;
    worker->open++;
    say("A "), say_number(worker->id), say(" "), say_number(conn->id), say(" "), say_number(listener), relay_say();
  }
}

/* Whether `fd` is a listening TCP socket bound to exactly `expected`. */
static int expected_listener(int fd, const struct sockaddr_in6 *expected) {
  int value = 0;
  u32 length = sizeof(value);
  if (sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_TYPE, (u64)&value, (u64)&length, 0) != 0 || value != SOCK_STREAM) return 0;
  length = sizeof(value);
  if (sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_PROTOCOL, (u64)&value, (u64)&length, 0) != 0 || value != IPPROTO_TCP) return 0;
  length = sizeof(value);
  if (sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, (u64)&value, (u64)&length, 0) != 0 || value != expected->family) return 0;
  length = sizeof(value);
  if (sys6(SYS_getsockopt, fd, SOL_SOCKET, SO_ACCEPTCONN, (u64)&value, (u64)&length, 0) != 0 || value != 1) return 0;
  struct sockaddr_in6 bound;
  memset(&bound, 0, sizeof(bound));
  length = sizeof(bound);
  if (sys(SYS_getsockname, fd, &bound, &length, 0) != 0) return 0;
  u32 size = expected->family == AF_INET ? 8 : 24;
  const u8 *a = (const u8 *)&bound, *b = (const u8 *)expected;
  for (u32 index = 0; index < size; index++) {
    if (index >= 4 && index < 8 && expected->family == AF_INET6) continue; /* flowinfo */
    if (a[index] != b[index]) return 0;
  }
  return 1;
}

static void worker_failed(struct relay_worker *worker, const char *why) {
  u64 id = worker->id;
  remove_worker(worker);
  say("E "), say_number(id), say(" "), say(why), relay_say();
}

/* The handover's one message: the magic and exactly the expected listeners. */
static void receive_handover(struct relay_worker *worker) {
  char data[32];
  u64 control[(sizeof(struct cmsghdr) + (NET_MAX_LISTENERS + 1) * sizeof(int) + 7) / 8 + 1];
  memset(control, 0, sizeof(control));
  struct iovec iov = {data, sizeof(data)};
  struct msghdr msg = {0, 0, &iov, 1, control, sizeof(control), 0};
  i64 n = sys(SYS_recvmsg, worker->handover, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, 0);
  if (n == -EAGAIN || n == -EINTR) return;
  close_fd(&worker->handover);
  int received[NET_MAX_LISTENERS + 1];
  u64 count = 0;
  struct cmsghdr *header = (struct cmsghdr *)control;
  if (n > 0 && msg.control_length >= sizeof(struct cmsghdr) && header->level == SOL_SOCKET && header->type == SCM_RIGHTS &&
      header->length >= sizeof(struct cmsghdr) && header->length <= sizeof(control)) {
    count = (header->length - sizeof(struct cmsghdr)) / sizeof(int);
    memcpy(received, (u8 *)control + sizeof(struct cmsghdr), count * sizeof(int));
  }
  int good = n == (i64)sizeof(HANDOVER_MAGIC) && !(msg.flags & MSG_CTRUNC) && count == worker->count &&
             starts_with(data, HANDOVER_MAGIC "\n", sizeof(HANDOVER_MAGIC));
  for (u64 index = 0; index < count; index++) {
    if (good && expected_listener(received[index], &worker->expected[index])) worker->listeners[index] = received[index];
    else good = 0, sys(SYS_close, received[index], 0, 0, 0);
  }
  if (!good) {
    worker_failed(worker, "the sandbox handed over something other than its listening sockets");
    return;
  }
  u64 w = (u64)(worker - workers);
  for (u64 index = 0; index < count; index++) {
    i64 flags = sys(SYS_fcntl, worker->listeners[index], F_GETFL, 0, 0);
    sys(SYS_fcntl, worker->listeners[index], F_SETFL, flags | O_NONBLOCK, 0);
    if (!accept_paused) watch(worker->listeners[index], EPOLLIN, KIND_LISTENER, w * NET_MAX_LISTENERS + index);
  }
  say("R "), say_number(worker->id), relay_say();
}

/* Takes the handover connection; nothing else ever connects there again. */
static void accept_handover(struct relay_worker *worker) {
  i64 fd = sys(SYS_accept4, worker->handover_listen, 0, 0, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  close_fd(&worker->handover_listen);
  char name[32];
  say_number(worker->id), say(".sock");
  memcpy(name, message, message_length), name[message_length] = 0;
  message_length = 0;
  sys(SYS_unlinkat, AT_FDCWD, name, 0, 0);
  worker->handover = (int)fd;
  watch(worker->handover, EPOLLIN | EPOLLRDHUP, KIND_HANDOVER, (u64)(worker - workers));
  receive_handover(worker);
}

/* The next space-separated word of a command line, or "" at its end. */
static char *word(char **line) {
  char *at = *line;
  while (*at == ' ') at++;
  char *start = at;
  while (*at != 0 && *at != ' ') at++;
  if (*at == ' ') *at++ = 0;
  *line = at;
  return start;
}

static u64 word_number(char **line) {
  char *text = word(line);
  u64 value = 0;
  for (; *text >= '0' && *text <= '9'; text++) value = value * 10 + (u64)(*text - '0');
  return value;
}

static void add_worker(char *line) {
  u64 id = word_number(&line), count = word_number(&line);
  struct relay_worker *worker = 0;
  for (u64 index = 0; index < RELAY_WORKERS && worker == 0; index++) {
    if (!workers[index].used) worker = &workers[index];
  }
  if (worker == 0 || count == 0 || count > NET_MAX_LISTENERS || worker_by_id(id) != 0) {
    say("E "), say_number(id), say(" too many workers or listeners"), relay_say();
    return;
  }
  memset(worker, 0, sizeof(*worker));
  worker->id = id;
  worker->count = count;
  worker->handover = -1;
  for (u64 index = 0; index < NET_MAX_LISTENERS; index++) worker->listeners[index] = -1;
  for (u64 index = 0; index < count; index++) {
    if (net_address(word(&line), &worker->expected[index]) == 0) {
      say("E "), say_number(id), say(" a malformed listener"), relay_say();
      return;
    }
  }
  struct sockaddr_un address = {AF_UNIX, {0}};
  say_number(id), say(".sock");
  memcpy(address.path, message, message_length);
  message_length = 0;
  i64 fd = sys(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, 0);
  i64 done = fd < 0 ? fd : sys(SYS_bind, fd, &address, sizeof(address), 0);
  if (done == 0) done = sys(SYS_listen, fd, 1, 0, 0);
  if (done != 0) {
    if (fd >= 0) sys(SYS_close, fd, 0, 0, 0);
    say("E "), say_number(id), say(" cannot listen (errno "), say_number((u64)-done), say(")"), relay_say();
    return;
  }
  worker->used = 1;
  worker->handover_listen = (int)fd;
  watch(worker->handover_listen, EPOLLIN, KIND_HANDOVER_LISTEN, (u64)(worker - workers));
  say("L "), say_number(id), relay_say();
}

static void command(char *line) {
  char *verb = word(&line);
  if (equal(verb, "w")) add_worker(line);
  else if (equal(verb, "c")) {
    struct relay_connection *conn = connection_by_id(word_number(&line));
    u64 attempt = word_number(&line);
    char *address = word(&line);
    if (conn != 0) connect_to(conn, attempt, address);
  } else if (equal(verb, "a")) {
    struct relay_connection *conn = connection_by_id(word_number(&line));
    if (conn != 0 && conn->state == CONNECTING) {
      sys(SYS_epoll_ctl, relay_epoll, EPOLL_CTL_DEL, conn->upstream, 0);
      close_fd(&conn->upstream);
      conn->state = WAITING;
    }
  } else if (equal(verb, "k")) {
    struct relay_connection *conn = connection_by_id(word_number(&line));
    if (conn != 0) close_connection(conn, 0);
  } else if (equal(verb, "r")) {
    struct relay_worker *worker = worker_by_id(word_number(&line));
    if (worker != 0) remove_worker(worker);
  }
}

static char input[1 << 16];
static u64 input_length;

static void read_commands(void) {
  for (;;) {
    i64 n = sys(SYS_read, 0, input + input_length, sizeof(input) - input_length, 0);
    if (n == -EAGAIN) return;
    if (n == -EINTR) continue;
    if (n <= 0) for (;;) sys(SYS_exit_group, 0, 0, 0, 0); /* the parent is gone */
    input_length += (u64)n;
    u64 start = 0;
    for (u64 index = 0; index < input_length; index++) {
      if (input[index] != '\n') continue;
      input[index] = 0;
      command(input + start);
      start = index + 1;
    }
    if (start == 0 && input_length == sizeof(input)) for (;;) sys(SYS_exit_group, 2, 0, 0, 0);
    for (u64 index = start; index < input_length; index++) input[index - start] = input[index];
    input_length -= start;
  }
}

struct relay_filter {
  u16 code;
  u8 jt, jf;
  u32 k;
};

#define BPF_LD_W_ABS 0x20
#define BPF_JEQ_K 0x15
#define BPF_JGE_K 0x35
#define BPF_RET_K 0x06
#define RET_ALLOW 0x7fff0000U
#define RET_KILL 0x80000000U
#define RET_ERRNO(e) (0x00050000U | (e))
#if defined(__x86_64__)
#define RELAY_ARCH 0xc000003eU
#else
#define RELAY_ARCH 0xc00000b7U
#endif
#define SYS_exit_thread_x86 60
#define SYS_exit_thread_arm 93

/*
 * The relay's own seccomp filter, installed before it reads a line: the
 * system calls its loop makes and nothing else (no open, no exec, no
 * mmap); sockets only of the unix, IPv4 and IPv6 families. Anything else
 * kills it (its workers then fail closed, and the next start makes
 * another).
 */
static void relay_filter(void) {
  static const u32 allowed[] = {
    SYS_read, SYS_write, SYS_close, SYS_connect, SYS_recvmsg, SYS_shutdown, SYS_bind,
    SYS_listen, SYS_getsockname, SYS_setsockopt, SYS_getsockopt, SYS_fcntl, SYS_epoll_ctl,
    SYS_epoll_pwait, SYS_unlinkat, SYS_splice, SYS_accept4, SYS_pipe2, SYS_exit_group,
#if defined(__x86_64__)
    SYS_exit_thread_x86,
#else
    SYS_exit_thread_arm,
#endif
  };
  enum { COUNT = sizeof(allowed) / sizeof(allowed[0]) };
  static struct relay_filter program[8 + 2 * COUNT + 6];
  u64 at = 0;
  program[at++] = (struct relay_filter){BPF_LD_W_ABS, 0, 0, 4}; /* arch */
  program[at++] = (struct relay_filter){BPF_JEQ_K, 1, 0, RELAY_ARCH};
  program[at++] = (struct relay_filter){BPF_RET_K, 0, 0, RET_KILL};
  program[at++] = (struct relay_filter){BPF_LD_W_ABS, 0, 0, 0}; /* nr */
#if defined(__x86_64__)
  program[at++] = (struct relay_filter){BPF_JGE_K, 0, 1, 0x40000000U}; /* x32 */
  program[at++] = (struct relay_filter){BPF_RET_K, 0, 0, RET_KILL};
#endif
  for (u64 index = 0; index < COUNT; index++) {
    program[at++] = (struct relay_filter){BPF_JEQ_K, 0, 1, allowed[index]};
    program[at++] = (struct relay_filter){BPF_RET_K, 0, 0, RET_ALLOW};
  }
  program[at++] = (struct relay_filter){BPF_JEQ_K, 1, 0, SYS_socket};
  program[at++] = (struct relay_filter){BPF_RET_K, 0, 0, RET_KILL};
  program[at++] = (struct relay_filter){BPF_LD_W_ABS, 0, 0, 16}; /* args[0], low half */
  program[at++] = (struct relay_filter){BPF_JEQ_K, 2, 0, AF_UNIX};
  program[at++] = (struct relay_filter){BPF_JEQ_K, 1, 0, AF_INET};
  program[at++] = (struct relay_filter){BPF_JEQ_K, 0, 1, AF_INET6};
  program[at++] = (struct relay_filter){BPF_RET_K, 0, 0, RET_ALLOW};
  program[at++] = (struct relay_filter){BPF_RET_K, 0, 0, RET_ERRNO(97)}; /* EAFNOSUPPORT */
  struct sock_fprog fprog = {(u16)at, program};
  i64 nnp = sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0);
  if (nnp != 0) say("cannot set no-new-privileges"), fail(nnp);
  i64 result = sys(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0);
  if (result != 0) say("cannot install the relay's seccomp filter"), fail(result);
}

static __attribute__((noreturn)) void relay_main(void) {
  u64 ignore[4] = {SIG_IGN, 0, 0, 0};
  sys(SYS_rt_sigaction, SIGPIPE, ignore, 0, 8);
  u64 limit[2];
  if (sys(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, limit) == 0) {
    limit[0] = limit[1];
    sys(SYS_prlimit64, 0, RLIMIT_NOFILE, limit, 0);
  }
  /* Nothing its spawner left open (a Deno parent's spawn leaks some) stays. */
  sys(SYS_close_range, 3, ~0U, 0, 0);
  i64 flags = sys(SYS_fcntl, 0, F_GETFL, 0, 0);
  sys(SYS_fcntl, 0, F_SETFL, flags | O_NONBLOCK, 0);
  i64 epoll = sys(SYS_epoll_create1, O_CLOEXEC, 0, 0, 0);
  if (epoll < 0) say("cannot make an epoll instance"), fail(epoll);
  relay_epoll = (int)epoll;
  watch(0, EPOLLIN, KIND_INPUT, 0);
  relay_filter();
  struct epoll_event events[64];
  for (;;) {
    i64 n = sys6(SYS_epoll_pwait, relay_epoll, (u64)events, 64, (u64)-1, 0, 8);
    for (i64 e = 0; e < n; e++) {
      int kind = (int)(events[e].data >> 56);
      u64 index = events[e].data & ((1UL << 56) - 1);
      if (kind == KIND_INPUT) read_commands();
      else if (kind == KIND_HANDOVER_LISTEN && workers[index].used && workers[index].handover_listen >= 0) accept_handover(&workers[index]);
      else if (kind == KIND_HANDOVER && workers[index].used && workers[index].handover >= 0) receive_handover(&workers[index]);
      else if (kind == KIND_LISTENER) {
        u64 w = index / NET_MAX_LISTENERS, l = index % NET_MAX_LISTENERS;
        if (workers[w].used && workers[w].listeners[l] >= 0) accept_on(w, l);
      } else if (kind == KIND_CLIENT || kind == KIND_UPSTREAM) {
        /* By id: a slot reused within one batch gets no event of its old descriptors. */
        struct relay_connection *conn = connection_by_id(index);
        if (conn == 0) continue;
        if (conn->state == CONNECTING && kind == KIND_UPSTREAM) {
          if (events[e].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) connecting(conn);
        } else if (conn->state == RELAYING) pump_connection(conn);
      }
    }
  }
}

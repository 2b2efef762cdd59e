/*
 * A small C shim over libxdp's AF_XDP socket API (xsk.h), whose ring accessors are
 * static inline functions that Rust cannot call directly. It owns one UMEM and one
 * socket per (interface, queue) and copies frames between the UMEM and the caller's
 * buffers in bursts: half of the UMEM frames serve the fill ring (receive), half the
 * transmit ring.
 *
 * The XDP program that redirects the frames of a queue to its socket (all but IKE for the
 * host's charon and frames tagged for a VLAN) is espgw's own (below), loaded and attached with libbpf when the first socket of
 * an interface opens and detached with the last one. libxdp's default program would do
 * the same, but libxdp takes a lock in (and pins its dispatcher to) a bpffs mount, which
 * it mounts itself where none is: that needs CAP_SYS_ADMIN, and a writable /sys/fs/bpf.
 * Loading our own needs only CAP_BPF and CAP_NET_ADMIN (measured: README, "Install").
 */
#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xdp/xsk.h>
#include <xdp/libxdp.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

/* UMEM frame sizes: 2 KiB where the interface's largest frame fits behind the headroom
 * the kernel keeps in front of every received frame (XDP_PACKET_HEADROOM, 256 bytes), that
 * is up to an MTU of 1774; 4 KiB (the most a frame may be in aligned mode) for anything
 * larger. The smaller frame halves the memory a ring of a given depth takes. */
#define FRAME_SMALL 2048u
#define FRAME_LARGE 4096u
/* The Ethernet header and one VLAN tag, on top of the MTU. */
#define FRAME_LINK_OVERHEAD 18u

/* The UMEM frame size for `ifname`: FRAME_SMALL when a frame of its MTU fits one after the
 * kernel's headroom, FRAME_LARGE otherwise or when the MTU cannot be read. */
static uint32_t frame_size_for(const char *ifname)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return FRAME_LARGE;
	int r = ioctl(s, SIOCGIFMTU, &ifr);
	close(s);
	if (r < 0 || ifr.ifr_mtu <= 0)
		return FRAME_LARGE;
	if ((uint32_t)ifr.ifr_mtu + FRAME_LINK_OVERHEAD + XDP_PACKET_HEADROOM <= FRAME_SMALL)
		return FRAME_SMALL;
	return FRAME_LARGE;
}

/* One XDP program and XSKMAP per interface, shared by its queues' sockets. An interface
 * is its network namespace and index: one process (the RFC 2544 tester) opens ports in
 * several namespaces, where the same index names different interfaces. */
struct espgw_xdp_prog {
	uint64_t netns;
	int ifindex;
	uint32_t xdp_flags;
	int prog_fd;
	int map_fd;
	/* The BPF link that holds the program on the interface: closing it detaches the
	 * program from the right interface whichever namespace the closing thread is in, and
	 * the kernel closes it if the process dies (no program left behind by SIGKILL).
	 * -1 where the kernel refused a link and the program is attached through netlink. */
	int link_fd;
	uint32_t users;
	struct espgw_xdp_prog *next;
};

/* Sockets open and close at start-up and shutdown, possibly from several threads. */
static pthread_mutex_t progs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct espgw_xdp_prog *progs;

/* Queue indexes the XSKMAP can hold (a socket on a higher queue is refused). */
#define XSKMAP_ENTRIES 256

/* The program, built instruction by instruction (no compiler, no BPF object file). Jumps
 * name their target by label; `assemble` turns labels into offsets. */
enum label { L_NONE, L_IPV4, L_IPV6, L_UDP, L_PASS, L_REDIRECT, L_COUNT };
struct asm_insn {
	struct bpf_insn insn;
	enum label target; /* a jump's target, or L_NONE */
	enum label here;   /* the label this instruction carries, or L_NONE */
};
#define I(c, d, s_, o, i) { .code = (c), .dst_reg = (d), .src_reg = (s_), .off = (o), .imm = (i) }
#define INS(...) { .insn = I(__VA_ARGS__) }
#define JMP(c, d, i, t) { .insn = I(BPF_JMP | (c) | BPF_K, d, 0, 0, i), .target = (t) }
#define JMPX(c, d, s_, t) { .insn = I(BPF_JMP | (c) | BPF_X, d, s_, 0, 0), .target = (t) }
#define AT(l, ...) { .insn = I(__VA_ARGS__), .here = (l) }

/* Network-order 16- and 32-bit fields as a little-endian load sees them. */
#define LE16(v) ((uint16_t)((((v) & 0xff) << 8) | ((v) >> 8)))
#define ETH_IPV4 LE16(0x0800)
#define ETH_IPV6 LE16(0x86dd)
#define ETH_VLAN LE16(0x8100)
#define ETH_QINQ LE16(0x88a8)
#define UDP_IKE LE16(500)
#define UDP_NATT LE16(4500)

/* The program: IKE for the host's charon goes to the kernel, everything else of a queue to
 * its socket (frames of a queue without one to the kernel):
 *
 *   UDP to port 500 (IKE), and UDP to port 4500 whose payload starts with the non-ESP
 *   marker (four zero bytes: IKE after NAT detection) or is shorter than four bytes (a NAT
 *   keepalive, RFC 3948 §2.3, which the kernel's encapsulation socket drops), over IPv4
 *   (a 20-byte header, not a later fragment) or IPv6 (UDP right after the fixed header):
 *   XDP_PASS;
 *   a frame tagged for a VLAN (802.1ad, or 802.1Q with a VLAN ID; not a priority tag,
 *   VLAN ID 0, which is the untagged network's): XDP_PASS, to the VLAN's sub-interface if
 *   the host has one (a management VLAN on the gateway's interface keeps working), else
 *   the kernel drops it; a gateway port is one untagged network;
 *   otherwise: return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS).
 *
 * ESP and ESP in UDP stay with espgw. Every packet read is bounds-checked against
 * data_end first, as the verifier requires. */
static int load_redirect_prog(int map_fd)
{
	struct asm_insn prog[] = {
		INS(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0),  /* r6 = ctx */
		INS(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_6, offsetof(struct xdp_md, data), 0),
		INS(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_3, BPF_REG_6, offsetof(struct xdp_md, data_end), 0),
		/* Ethernet */
		INS(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_4, BPF_REG_2, 0, 0),
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_4, 0, 0, 14),
		JMPX(BPF_JGT, BPF_REG_4, BPF_REG_3, L_REDIRECT),
		INS(BPF_LDX | BPF_H | BPF_MEM, BPF_REG_5, BPF_REG_2, 12, 0),
		JMP(BPF_JEQ, BPF_REG_5, ETH_IPV4, L_IPV4),
		JMP(BPF_JEQ, BPF_REG_5, ETH_IPV6, L_IPV6),
		JMP(BPF_JEQ, BPF_REG_5, ETH_QINQ, L_PASS),
		JMP(BPF_JNE, BPF_REG_5, ETH_VLAN, L_REDIRECT),
		/* 802.1Q: its VLAN ID, the TCI's low 12 bits (a short frame is the socket's to
		 * refuse) */
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_4, 0, 0, 4),
		JMPX(BPF_JGT, BPF_REG_4, BPF_REG_3, L_REDIRECT),
		INS(BPF_LDX | BPF_H | BPF_MEM, BPF_REG_5, BPF_REG_2, 14, 0),
		INS(BPF_ALU64 | BPF_AND | BPF_K, BPF_REG_5, 0, 0, LE16(0x0fff)),
		JMP(BPF_JNE, BPF_REG_5, 0, L_PASS),
		JMP(BPF_JA, 0, 0, L_REDIRECT),
		/* IPv4 without options (IKE carries none; a variable offset would need
		 * CAP_PERFMON, which the gateway's unit does not grant), protocol UDP, not a
		 * later fragment */
		AT(L_IPV4, BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_4, BPF_REG_2, 0, 0),
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_4, 0, 0, 34),
		JMPX(BPF_JGT, BPF_REG_4, BPF_REG_3, L_REDIRECT),
		INS(BPF_LDX | BPF_B | BPF_MEM, BPF_REG_5, BPF_REG_2, 14, 0),
		JMP(BPF_JNE, BPF_REG_5, 0x45, L_REDIRECT),
		INS(BPF_LDX | BPF_B | BPF_MEM, BPF_REG_5, BPF_REG_2, 23, 0),
		JMP(BPF_JNE, BPF_REG_5, 17, L_REDIRECT),
		INS(BPF_LDX | BPF_H | BPF_MEM, BPF_REG_5, BPF_REG_2, 20, 0),
		INS(BPF_ALU64 | BPF_AND | BPF_K, BPF_REG_5, 0, 0, LE16(0x1fff)),
		JMP(BPF_JNE, BPF_REG_5, 0, L_REDIRECT),
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, 34),
		JMP(BPF_JA, 0, 0, L_UDP),
		/* IPv6: next header UDP */
		AT(L_IPV6, BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_4, BPF_REG_2, 0, 0),
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_4, 0, 0, 54),
		JMPX(BPF_JGT, BPF_REG_4, BPF_REG_3, L_REDIRECT),
		INS(BPF_LDX | BPF_B | BPF_MEM, BPF_REG_5, BPF_REG_2, 20, 0),
		JMP(BPF_JNE, BPF_REG_5, 17, L_REDIRECT),
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, 54),
		/* UDP (r2: its header): port 500, or 4500 with the marker or a keepalive */
		AT(L_UDP, BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_4, BPF_REG_2, 0, 0),
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_4, 0, 0, 8),
		JMPX(BPF_JGT, BPF_REG_4, BPF_REG_3, L_REDIRECT),
		INS(BPF_LDX | BPF_H | BPF_MEM, BPF_REG_5, BPF_REG_2, 2, 0),
		JMP(BPF_JEQ, BPF_REG_5, UDP_IKE, L_PASS),
		JMP(BPF_JNE, BPF_REG_5, UDP_NATT, L_REDIRECT),
		INS(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_4, 0, 0, 4),
		JMPX(BPF_JGT, BPF_REG_4, BPF_REG_3, L_PASS),
		INS(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_5, BPF_REG_2, 8, 0),
		JMP(BPF_JEQ, BPF_REG_5, 0, L_PASS),
		JMP(BPF_JA, 0, 0, L_REDIRECT),
		AT(L_PASS, BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_PASS),
		INS(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
		/* The queue's socket, or the kernel where the queue has none. */
		AT(L_REDIRECT, BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_6,
		   offsetof(struct xdp_md, rx_queue_index), 0),
		/* r1 = &xsks (a 16-byte load of the map's fd, rewritten by the verifier) */
		INS(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map_fd),
		INS(0, 0, 0, 0, 0),
		INS(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_3, 0, 0, XDP_PASS),
		INS(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_redirect_map),
		INS(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	};
	enum { N = sizeof(prog) / sizeof(prog[0]) };
	struct bpf_insn insns[N];
	int at[L_COUNT];
	for (int i = 0; i < L_COUNT; i++)
		at[i] = -1;
	for (int i = 0; i < N; i++)
		if (prog[i].here != L_NONE)
			at[prog[i].here] = i;
	for (int i = 0; i < N; i++) {
		insns[i] = prog[i].insn;
		if (prog[i].target != L_NONE) {
			if (at[prog[i].target] < 0)
				return -EINVAL;
			insns[i].off = (int16_t)(at[prog[i].target] - (i + 1));
		}
	}
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_XDP);
	/* The program is espgw's (Apache-2.0); the one helper it calls is not GPL-only. */
	return bpf_prog_load(BPF_PROG_TYPE_XDP, "espgw_xsk", "Apache-2.0", insns, N, &opts);
}

/* Attaches the program to the interface with a BPF link. A program attached the older
 * way (netlink: by libxdp, another tool, or an espgw before links) is in the way of a
 * link: it is detached and the link tried again; where links are refused altogether, the
 * program is attached through netlink instead. Returns 0 or a negative errno. */
static int attach(struct espgw_xdp_prog *p)
{
	LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = p->xdp_flags);
	p->link_fd = bpf_link_create(p->prog_fd, p->ifindex, BPF_XDP, &opts);
	if (p->link_fd >= 0)
		return 0;
	bpf_xdp_detach(p->ifindex, p->xdp_flags, NULL);
	p->link_fd = bpf_link_create(p->prog_fd, p->ifindex, BPF_XDP, &opts);
	if (p->link_fd >= 0)
		return 0;
	p->link_fd = -1;
	return bpf_xdp_attach(p->ifindex, p->prog_fd, p->xdp_flags, NULL);
}

/* The calling thread's network namespace (the inode of its ns file), or 0. */
static uint64_t current_netns(void)
{
	struct stat st;
	if (stat("/proc/thread-self/ns/net", &st) != 0)
		return 0;
	return ((uint64_t)st.st_dev << 32) ^ (uint64_t)st.st_ino;
}

/* Takes a reference on the interface's program, loading and attaching it for the first
 * socket. An XDP program already attached (one left by a gateway that was killed) is
 * replaced: espgw owns the port. Returns the XSKMAP's fd or a negative errno. */
static int prog_get(uint64_t netns, int ifindex, uint32_t xdp_flags)
{
	struct espgw_xdp_prog *p;
	int ret;
	pthread_mutex_lock(&progs_lock);
	for (p = progs; p; p = p->next) {
		if (p->netns == netns && p->ifindex == ifindex) {
			if (p->xdp_flags != xdp_flags) {
				ret = -EINVAL;
				goto out;
			}
			p->users++;
			ret = p->map_fd;
			goto out;
		}
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		ret = -ENOMEM;
		goto out;
	}
	p->netns = netns;
	p->ifindex = ifindex;
	p->xdp_flags = xdp_flags;
	p->map_fd = bpf_map_create(BPF_MAP_TYPE_XSKMAP, "espgw_xsks", sizeof(uint32_t),
				   sizeof(uint32_t), XSKMAP_ENTRIES, NULL);
	if (p->map_fd < 0) {
		ret = -errno;
		free(p);
		goto out;
	}
	p->prog_fd = load_redirect_prog(p->map_fd);
	if (p->prog_fd < 0) {
		ret = -errno;
		close(p->map_fd);
		free(p);
		goto out;
	}
	ret = attach(p);
	if (ret < 0) {
		close(p->prog_fd);
		close(p->map_fd);
		free(p);
		goto out;
	}
	p->users = 1;
	p->next = progs;
	progs = p;
	ret = p->map_fd;
out:
	pthread_mutex_unlock(&progs_lock);
	return ret;
}

/* Drops a reference; the last one detaches the program from the interface (the caller
 * is in the interface's namespace, as when it opened the socket). */
static void prog_put(uint64_t netns, int ifindex, uint32_t queue)
{
	struct espgw_xdp_prog **pp, *p;
	pthread_mutex_lock(&progs_lock);
	for (pp = &progs; (p = *pp); pp = &p->next) {
		if (p->netns != netns || p->ifindex != ifindex)
			continue;
		bpf_map_delete_elem(p->map_fd, &queue);
		if (--p->users == 0) {
			if (p->link_fd >= 0)
				close(p->link_fd);
			else if (current_netns() == p->netns)
				bpf_xdp_detach(ifindex, p->xdp_flags, NULL);
			close(p->prog_fd);
			close(p->map_fd);
			*pp = p->next;
			free(p);
		}
		break;
	}
	pthread_mutex_unlock(&progs_lock);
}

struct espgw_xsk {
	struct xsk_ring_prod fq;
	struct xsk_ring_cons cq;
	struct xsk_ring_cons rx;
	struct xsk_ring_prod tx;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	void *area;
	uint64_t area_len;
	uint32_t nframes;
	/* Bytes per UMEM frame (FRAME_SMALL or FRAME_LARGE, see frame_size_for). */
	uint32_t frame_size;
	/* Transmit frames not in flight. */
	uint64_t *free_tx;
	uint32_t nfree;
	uint32_t tx_in_flight;
	/* Receive frames taken from the receive ring that wait for room in the fill ring
	 * (see return_rx_frames); at most nrx of them. */
	uint64_t *fill_pending;
	uint32_t npending;
	uint32_t nrx;
	/* Completion-ring entries that named no transmit frame of ours (never expected). */
	uint64_t bad_completions;
	/* Busy polling on: an empty receive ring is answered with recvfrom() every time, so
	 * that the call runs the queue's NAPI poll in this thread (see espgw_xsk_busy_poll). */
	int busy_poll;
	int zero_copy;
	uint64_t netns;
	int ifindex;
	uint32_t queue;
};

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	(void)level; (void)fmt; (void)ap;
	return 0;
}

void espgw_xsk_quiet(void)
{
	libbpf_set_print(quiet_print);
	libxdp_set_print((libxdp_print_fn_t)quiet_print);
}

/* mode: 0 = let the kernel choose (zero-copy where the driver can), 1 = force copy
 * mode, 2 = generic XDP (skb mode) with copy. Returns 0 or a negative errno. */
int espgw_xsk_open(const char *ifname, uint32_t queue, int mode, uint32_t nframes,
		   struct espgw_xsk **out)
{
	int ifindex = (int)if_nametoindex(ifname);
	if (ifindex == 0)
		return -ENODEV;
	if (queue >= XSKMAP_ENTRIES)
		return -ERANGE;
	struct espgw_xsk *x = calloc(1, sizeof(*x));
	int ret;
	if (!x)
		return -ENOMEM;
	x->netns = current_netns();
	x->ifindex = ifindex;
	x->queue = queue;
	if (nframes < 64)
		nframes = 64;
	x->nframes = nframes;
	x->frame_size = frame_size_for(ifname);
	x->area_len = (uint64_t)nframes * x->frame_size;
	x->area = mmap(NULL, x->area_len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (x->area == MAP_FAILED) {
		free(x);
		return -ENOMEM;
	}
	struct xsk_umem_config ucfg = {
		.fill_size = nframes / 2,
		.comp_size = nframes / 2,
		.frame_size = x->frame_size,
		.frame_headroom = 0,
		.flags = 0,
	};
	/* Ring sizes must be powers of two. */
	uint32_t ring = 1;
	while (ring * 2 <= nframes / 2)
		ring *= 2;
	ucfg.fill_size = ring;
	ucfg.comp_size = ring;
	ret = xsk_umem__create(&x->umem, x->area, x->area_len, &x->fq, &x->cq, &ucfg);
	if (ret) {
		munmap(x->area, x->area_len);
		free(x);
		return ret < 0 ? ret : -ret;
	}
	struct xsk_socket_config scfg = {
		.rx_size = ring,
		.tx_size = ring,
		.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
		.xdp_flags = mode == 2 ? XDP_FLAGS_SKB_MODE : 0,
		.bind_flags = XDP_USE_NEED_WAKEUP | (mode >= 1 ? XDP_COPY : 0),
	};
	ret = xsk_socket__create(&x->xsk, ifname, queue, x->umem, &x->rx, &x->tx, &scfg);
	if (ret) {
		xsk_umem__delete(x->umem);
		munmap(x->area, x->area_len);
		free(x);
		return ret < 0 ? ret : -ret;
	}
	/* Which mode the kernel chose: the statistics mean different things in each. */
	struct xdp_options xopts;
	socklen_t xlen = sizeof(xopts);
	if (getsockopt(xsk_socket__fd(x->xsk), SOL_XDP, XDP_OPTIONS, &xopts, &xlen) == 0)
		x->zero_copy = (xopts.flags & XDP_OPTIONS_ZEROCOPY) != 0;
	int map_fd = prog_get(x->netns, ifindex, scfg.xdp_flags);
	if (map_fd >= 0)
		ret = xsk_socket__update_xskmap(x->xsk, map_fd);
	else
		ret = map_fd;
	if (ret) {
		if (map_fd >= 0)
			prog_put(x->netns, ifindex, queue);
		xsk_socket__delete(x->xsk);
		xsk_umem__delete(x->umem);
		munmap(x->area, x->area_len);
		free(x);
		return ret < 0 ? ret : -ret;
	}
	/* Receive frames: the first half of the UMEM, all given to the kernel. */
	uint32_t idx = 0;
	uint32_t nfill = ring < nframes / 2 ? ring : nframes / 2;
	if (xsk_ring_prod__reserve(&x->fq, nfill, &idx) != nfill) {
		prog_put(x->netns, ifindex, queue);
		xsk_socket__delete(x->xsk);
		xsk_umem__delete(x->umem);
		munmap(x->area, x->area_len);
		free(x);
		return -EIO;
	}
	for (uint32_t i = 0; i < nfill; i++)
		*xsk_ring_prod__fill_addr(&x->fq, idx + i) = (uint64_t)i * x->frame_size;
	xsk_ring_prod__submit(&x->fq, nfill);
	x->nrx = nfill;
	/* Transmit frames: the second half. */
	x->free_tx = calloc(nframes - nframes / 2, sizeof(uint64_t));
	x->fill_pending = calloc(nfill, sizeof(uint64_t));
	if (!x->free_tx || !x->fill_pending) {
		free(x->free_tx);
		free(x->fill_pending);
		prog_put(x->netns, ifindex, queue);
		xsk_socket__delete(x->xsk);
		xsk_umem__delete(x->umem);
		munmap(x->area, x->area_len);
		free(x);
		return -ENOMEM;
	}
	for (uint32_t i = nframes / 2; i < nframes; i++)
		x->free_tx[x->nfree++] = (uint64_t)i * x->frame_size;
	*out = x;
	return 0;
}

/* Bytes per UMEM frame: the largest frame this socket transmits. */
uint32_t espgw_xsk_frame_size(struct espgw_xsk *x)
{
	return x->frame_size;
}

int espgw_xsk_fd(struct espgw_xsk *x)
{
	return xsk_socket__fd(x->xsk);
}

void espgw_xsk_close(struct espgw_xsk *x)
{
	if (!x)
		return;
	prog_put(x->netns, x->ifindex, x->queue);
	xsk_socket__delete(x->xsk);
	xsk_umem__delete(x->umem);
	munmap(x->area, x->area_len);
	free(x->free_tx);
	free(x->fill_pending);
	free(x);
}

#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

/* Busy polling (kernel 5.11+): the socket's own calls run the receive queue's NAPI poll
 * for up to `usecs` with at most `budget` frames a poll, and the kernel prefers them to its
 * softirq, so the worker, not a softirq thread, moves the frames. Returns 0 or -errno (the
 * first option refused) and puts the socket's busy-poll time as read back in *usecs_set. */
int espgw_xsk_busy_poll(struct espgw_xsk *x, int usecs, int budget, int *usecs_set)
{
	int fd = xsk_socket__fd(x->xsk);
	int one = 1;
	socklen_t len = sizeof(*usecs_set);
	if (setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof(one)) < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &usecs, sizeof(usecs)) < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof(budget)) < 0)
		return -errno;
	/* Read back what the kernel holds now (what the operator's log shows). */
	if (getsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, usecs_set, &len) < 0)
		return -errno;
	x->busy_poll = 1;
	return 0;
}

/* Whether an empty receive ring calls for recvfrom(): the kernel asks for it (need_wakeup),
 * or busy polling is on and the call does the receiving. */
static int rx_kick_due(struct espgw_xsk *x)
{
	return x->busy_poll || xsk_ring_prod__needs_wakeup(&x->fq);
}

/* Gives the kernel back the receive frames waiting in fill_pending, as many as the fill
 * ring has room for now.
 *
 * The room can be short for a moment even though every receive frame has a slot: the
 * kernel publishes new receive-ring entries before it publishes how far it has read the
 * fill ring (xsk_flush), so a frame can be seen in the receive ring while its fill-ring
 * slot still looks taken. Frames that do not fit wait here for the next call instead of
 * being skipped: skipping them (as an earlier version did) lost the frames silently and
 * left their UMEM frames and receive-ring slots out of circulation for good. */
static void return_rx_frames(struct espgw_xsk *x)
{
	if (x->npending == 0)
		return;
	uint32_t room = xsk_prod_nb_free(&x->fq, x->npending);
	uint32_t k = room < x->npending ? room : x->npending;
	uint32_t idx = 0;
	if (k == 0 || xsk_ring_prod__reserve(&x->fq, k, &idx) != k)
		return;
	for (uint32_t i = 0; i < k; i++)
		*xsk_ring_prod__fill_addr(&x->fq, idx + i) = x->fill_pending[--x->npending];
	xsk_ring_prod__submit(&x->fq, k);
}

/* How many received frames wait (at most `max`), without taking them: lets the caller
 * skip preparing buffers when the ring is empty (the common case of an idle poll).
 * Returns waiting frames to the fill ring first. */
uint32_t espgw_xsk_rx_ready(struct espgw_xsk *x, uint32_t max)
{
	return_rx_frames(x);
	uint32_t n = xsk_cons_nb_avail(&x->rx, max);
	if (n == 0 && rx_kick_due(x))
		recvfrom(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
	return n;
}

/* Copies up to `max` received frames into bufs[i] (capacity `cap` each) and their
 * lengths into lens[i]; frames longer than `cap` are dropped and counted in *oversized.
 * Returns how many were copied. Every frame taken from the receive ring goes back to the
 * fill ring, now or (see return_rx_frames) on a later call. */
uint32_t espgw_xsk_rx(struct espgw_xsk *x, uint8_t **bufs, uint32_t *lens, uint32_t max,
		      uint32_t cap, uint64_t *oversized)
{
	return_rx_frames(x);
	uint32_t idx_rx = 0;
	uint32_t n = xsk_ring_cons__peek(&x->rx, max, &idx_rx);
	if (n == 0) {
		if (rx_kick_due(x))
			recvfrom(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
		return 0;
	}
	uint32_t got = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *d = xsk_ring_cons__rx_desc(&x->rx, idx_rx + i);
		uint64_t addr = xsk_umem__extract_addr(d->addr);
		uint64_t off = xsk_umem__extract_offset(d->addr);
		if (d->len <= cap && addr + off + d->len <= x->area_len) {
			memcpy(bufs[got], (uint8_t *)x->area + addr + off, d->len);
			lens[got] = d->len;
			got++;
		} else {
			(*oversized)++;
		}
		/* Each receive frame is in exactly one place (fill ring, kernel, receive ring
		 * or here), so the list cannot overflow; the bound is kept regardless. */
		if (x->npending < x->nrx)
			x->fill_pending[x->npending++] = addr;
	}
	xsk_ring_cons__release(&x->rx, n);
	return_rx_frames(x);
	return got;
}

/* Takes back transmit frames the kernel completed. The completion ring is shared memory
 * the kernel writes: read at most as many entries as frames are in flight (so the free
 * list, sized for the transmit half, cannot overflow), and accept only addresses that are
 * transmit frames (in the UMEM's second half, frame-aligned); anything else is counted
 * and ignored, as receive descriptors out of range are. */
static void reclaim(struct espgw_xsk *x)
{
	uint32_t idx = 0;
	uint32_t n = xsk_ring_cons__peek(&x->cq, x->tx_in_flight, &idx);
	uint64_t tx_lo = (uint64_t)(x->nframes / 2) * x->frame_size;
	uint32_t cap = x->nframes - x->nframes / 2;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t addr = *xsk_ring_cons__comp_addr(&x->cq, idx + i);
		if (addr < tx_lo || addr >= x->area_len || addr % x->frame_size || x->nfree >= cap) {
			x->bad_completions++;
			continue;
		}
		x->free_tx[x->nfree++] = addr;
	}
	if (n) {
		xsk_ring_cons__release(&x->cq, n);
		x->tx_in_flight -= n;
	}
}

/* Sends n frames; returns how many were queued (the rest: no free frame or ring slot). */
uint32_t espgw_xsk_tx(struct espgw_xsk *x, const uint8_t **frames, const uint32_t *lens,
		      uint32_t n)
{
	reclaim(x);
	uint32_t k = n < x->nfree ? n : x->nfree;
	uint32_t idx = 0;
	if (k == 0)
		goto kick;
	k = xsk_ring_prod__reserve(&x->tx, k, &idx);
	for (uint32_t i = 0; i < k; i++) {
		uint64_t addr = x->free_tx[--x->nfree];
		/* The caller never passes frames larger than a UMEM frame (checked there, with
		 * espgw_xsk_frame_size); the bound is kept regardless. */
		uint32_t len = lens[i] <= x->frame_size ? lens[i] : x->frame_size;
		memcpy((uint8_t *)x->area + addr, frames[i], len);
		struct xdp_desc *d = xsk_ring_prod__tx_desc(&x->tx, idx + i);
		d->addr = addr;
		d->len = len;
	}
	xsk_ring_prod__submit(&x->tx, k);
	x->tx_in_flight += k;
kick:
	if (x->tx_in_flight && (x->busy_poll || xsk_ring_prod__needs_wakeup(&x->tx))) {
		/* In copy mode one sendto transmits at most 32 frames (the kernel's
		 * TX_BATCH_SIZE) and answers EAGAIN while more wait in the ring; a
		 * single kick per burst of 64 left a growing backlog (milliseconds of
		 * latency, then drops). Kick until the ring is drained, boundedly. */
		for (int i = 0; i < 16; i++) {
			if (sendto(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, 0) >= 0)
				break;
			if (errno != EAGAIN && errno != EBUSY)
				break;
		}
	}
	reclaim(x);
	return k;
}

/* Kernel-side counters: rx_dropped, rx_ring_full, rx_fill_ring_empty (copy mode only: in
 * zero-copy mode it counts a driver's failed refills, not frames), tx_invalid. */
int espgw_xsk_stats(struct espgw_xsk *x, uint64_t out[5])
{
	struct xdp_statistics s;
	socklen_t len = sizeof(s);
	memset(&s, 0, sizeof(s));
	if (getsockopt(xsk_socket__fd(x->xsk), SOL_XDP, XDP_STATISTICS, &s, &len))
		return -errno;
	out[0] = s.rx_dropped;
	out[1] = s.rx_ring_full;
	out[2] = x->zero_copy ? 0 : s.rx_fill_ring_empty_descs;
	out[3] = s.tx_invalid_descs;
	out[4] = x->bad_completions;
	return 0;
}

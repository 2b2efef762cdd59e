/*
 * A small C shim over libxdp's AF_XDP socket API (xsk.h), whose ring accessors are
 * static inline functions that Rust cannot call directly. It owns one UMEM and one
 * socket per (interface, queue) and copies frames between the UMEM and the caller's
 * buffers in bursts: half of the UMEM frames serve the fill ring (receive), half the
 * transmit ring.
 *
 * libxdp loads its default XDP program (redirect every frame of the queue to the
 * socket) when the first socket of an interface is created, and unloads it with the
 * last one.
 */
#include <errno.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>
#include <xdp/libxdp.h>
#include <bpf/libbpf.h>

#define FRAME_SIZE XSK_UMEM__DEFAULT_FRAME_SIZE

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
	/* Transmit frames not in flight. */
	uint64_t *free_tx;
	uint32_t nfree;
	uint32_t tx_in_flight;
	int zero_copy;
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
	struct espgw_xsk *x = calloc(1, sizeof(*x));
	int ret;
	if (!x)
		return -ENOMEM;
	if (nframes < 64)
		nframes = 64;
	x->nframes = nframes;
	x->area_len = (uint64_t)nframes * FRAME_SIZE;
	x->area = mmap(NULL, x->area_len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (x->area == MAP_FAILED) {
		free(x);
		return -ENOMEM;
	}
	struct xsk_umem_config ucfg = {
		.fill_size = nframes / 2,
		.comp_size = nframes / 2,
		.frame_size = FRAME_SIZE,
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
		.libxdp_flags = 0,
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
	/* Receive frames: the first half of the UMEM, all given to the kernel. */
	uint32_t idx = 0;
	uint32_t nfill = ring < nframes / 2 ? ring : nframes / 2;
	if (xsk_ring_prod__reserve(&x->fq, nfill, &idx) != nfill) {
		xsk_socket__delete(x->xsk);
		xsk_umem__delete(x->umem);
		munmap(x->area, x->area_len);
		free(x);
		return -EIO;
	}
	for (uint32_t i = 0; i < nfill; i++)
		*xsk_ring_prod__fill_addr(&x->fq, idx + i) = (uint64_t)i * FRAME_SIZE;
	xsk_ring_prod__submit(&x->fq, nfill);
	/* Transmit frames: the second half. */
	x->free_tx = calloc(nframes - nframes / 2, sizeof(uint64_t));
	if (!x->free_tx) {
		xsk_socket__delete(x->xsk);
		xsk_umem__delete(x->umem);
		munmap(x->area, x->area_len);
		free(x);
		return -ENOMEM;
	}
	for (uint32_t i = nframes / 2; i < nframes; i++)
		x->free_tx[x->nfree++] = (uint64_t)i * FRAME_SIZE;
	*out = x;
	return 0;
}

int espgw_xsk_fd(struct espgw_xsk *x)
{
	return xsk_socket__fd(x->xsk);
}

void espgw_xsk_close(struct espgw_xsk *x)
{
	if (!x)
		return;
	xsk_socket__delete(x->xsk);
	xsk_umem__delete(x->umem);
	munmap(x->area, x->area_len);
	free(x->free_tx);
	free(x);
}

/* How many received frames wait (at most `max`), without taking them: lets the caller
 * skip preparing buffers when the ring is empty (the common case of an idle poll). */
uint32_t espgw_xsk_rx_ready(struct espgw_xsk *x, uint32_t max)
{
	uint32_t n = xsk_cons_nb_avail(&x->rx, max);
	if (n == 0 && xsk_ring_prod__needs_wakeup(&x->fq))
		recvfrom(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
	return n;
}

/* Copies up to `max` received frames into bufs[i] (capacity `cap` each) and their
 * lengths into lens[i]; frames longer than `cap` are dropped and counted in *oversized.
 * Returns how many were copied. */
uint32_t espgw_xsk_rx(struct espgw_xsk *x, uint8_t **bufs, uint32_t *lens, uint32_t max,
		      uint32_t cap, uint64_t *oversized)
{
	uint32_t idx_rx = 0, idx_fq = 0;
	uint32_t n = xsk_ring_cons__peek(&x->rx, max, &idx_rx);
	if (n == 0) {
		if (xsk_ring_prod__needs_wakeup(&x->fq))
			recvfrom(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
		return 0;
	}
	/* The fill ring has room for every frame the kernel moved to the receive ring
	 * (the same frames go back); if not, leave them for the next call. */
	if (xsk_ring_prod__reserve(&x->fq, n, &idx_fq) != n)
		return 0;
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
		*xsk_ring_prod__fill_addr(&x->fq, idx_fq + i) = addr;
	}
	xsk_ring_prod__submit(&x->fq, n);
	xsk_ring_cons__release(&x->rx, n);
	return got;
}

static void reclaim(struct espgw_xsk *x)
{
	uint32_t idx = 0;
	uint32_t n = xsk_ring_cons__peek(&x->cq, x->nframes, &idx);
	for (uint32_t i = 0; i < n; i++)
		x->free_tx[x->nfree++] = *xsk_ring_cons__comp_addr(&x->cq, idx + i);
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
		/* The caller never passes frames larger than a UMEM frame (checked there). */
		uint32_t len = lens[i] <= FRAME_SIZE ? lens[i] : FRAME_SIZE;
		memcpy((uint8_t *)x->area + addr, frames[i], len);
		struct xdp_desc *d = xsk_ring_prod__tx_desc(&x->tx, idx + i);
		d->addr = addr;
		d->len = len;
	}
	xsk_ring_prod__submit(&x->tx, k);
	x->tx_in_flight += k;
kick:
	if (x->tx_in_flight && xsk_ring_prod__needs_wakeup(&x->tx)) {
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

/* Kernel-side counters: rx_dropped, rx_ring_full, rx_fill_ring_empty, tx_invalid. */
int espgw_xsk_stats(struct espgw_xsk *x, uint64_t out[4])
{
	struct xdp_statistics s;
	socklen_t len = sizeof(s);
	memset(&s, 0, sizeof(s));
	if (getsockopt(xsk_socket__fd(x->xsk), SOL_XDP, XDP_STATISTICS, &s, &len))
		return -errno;
	out[0] = s.rx_dropped;
	out[1] = s.rx_ring_full;
	out[2] = s.rx_fill_ring_empty_descs;
	out[3] = s.tx_invalid_descs;
	return 0;
}

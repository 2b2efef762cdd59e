/*
 * Copyright (C) 2026 espgw developers
 *
 * This program is free software; you can redistribute it and/or modify it
 * under the terms of the GNU General Public License as published by the
 * Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.  See <http://www.fsf.org/copyleft/gpl.txt>.
 *
 * This program is distributed in the hope that it will be useful, but
 * WITHOUT ANY WARRANTY; without even the implied warranty of MERCHANTABILITY
 * or FITNESS FOR A PARTICULAR PURPOSE.  See the GNU General Public License
 * for more details.
 */

/*
 * charon's kernel_ipsec_t, each call one request on espgw's keying socket (the SA
 * contract, version 1: espgw's docs/sa-contract.md). A reader thread takes replies and
 * events (EXPIRE, ACQUIRE); requests are serialised and wait for their reply. When espgw
 * goes away the reader reconnects; on a new connection it installs the policies again and
 * asks charon to rekey every SA it had installed, because a restarted espgw has lost them
 * and must never be given an old key again (it would repeat nonces).
 */

#include "kernel_espgw_ipsec.h"

#include <daemon.h>
#include <threading/mutex.h>
#include <threading/condvar.h>
#include <threading/thread.h>
#include <collections/linked_list.h>

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define CONTRACT_VERSION 1
#define MAX_FRAME 16384
#define HEADER_LEN 12
#define REPLY_TIMEOUT_MS 5000

enum {
	K_HELLO = 1, K_GET_SPI, K_ADD_SA, K_UPDATE_SA, K_QUERY_SA, K_DEL_SA, K_FLUSH_SAS,
	K_ADD_POLICY, K_QUERY_POLICY, K_DEL_POLICY, K_FLUSH_POLICIES,
	K_EXPIRE = 0x40, K_ACQUIRE = 0x41, K_OK = 0x80, K_ERROR = 0x81,
};

enum {
	F_VERSION = 1, F_SRC, F_DST, F_SPI, F_PROTO, F_REQID, F_MODE, F_ENC_ALG, F_ENC_KEY,
	F_INT_ALG, F_INT_KEY, F_REPLAY_WINDOW, F_ENCAP, F_ESN, F_INBOUND, F_LIFETIME, F_SRC_TS,
	F_DST_TS, F_DIRECTION, F_POLICY_TYPE, F_PRIORITY, F_ESP_SPI, F_AH_SPI, F_NEW_SRC,
	F_NEW_DST, F_BYTES, F_PACKETS, F_IDLE, F_HARD, F_ERROR_CODE, F_MESSAGE,
};

/** One frame being built or received. */
typedef struct {
	uint8_t buf[MAX_FRAME];
	size_t len;
	bool overflow;
} frame_t;

static void frame_init(frame_t *f, uint8_t kind)
{
	memset(f->buf, 0, HEADER_LEN);
	f->buf[4] = CONTRACT_VERSION;
	f->buf[5] = kind;
	f->len = HEADER_LEN;
	f->overflow = FALSE;
}

static void put(frame_t *f, uint16_t type, const void *v, size_t len)
{
	if (len > 0xffff || f->len + 4 + len > MAX_FRAME)
	{
		f->overflow = TRUE;
		return;
	}
	htoun16(f->buf + f->len, type);
	htoun16(f->buf + f->len + 2, len);
	if (len)
	{
		memcpy(f->buf + f->len + 4, v, len);
	}
	f->len += 4 + len;
}

static void put_u8(frame_t *f, uint16_t type, uint8_t v)
{
	put(f, type, &v, 1);
}

static void put_u16(frame_t *f, uint16_t type, uint16_t v)
{
	uint8_t b[2];
	htoun16(b, v);
	put(f, type, b, 2);
}

static void put_u32(frame_t *f, uint16_t type, uint32_t v)
{
	uint8_t b[4];
	htoun32(b, v);
	put(f, type, b, 4);
}

static void put_host(frame_t *f, uint16_t type, host_t *h)
{
	chunk_t a = h->get_address(h);
	put(f, type, a.ptr, a.len);
}

static void put_ts(frame_t *f, uint16_t type, traffic_selector_t *ts)
{
	uint8_t b[5 + 32];
	chunk_t from = ts->get_from_address(ts), to = ts->get_to_address(ts);

	if (from.len != to.len || (from.len != 4 && from.len != 16))
	{
		f->overflow = TRUE;
		return;
	}
	b[0] = ts->get_protocol(ts);
	htoun16(b + 1, ts->get_from_port(ts));
	htoun16(b + 3, ts->get_to_port(ts));
	memcpy(b + 5, from.ptr, from.len);
	memcpy(b + 5 + from.len, to.ptr, to.len);
	put(f, type, b, 5 + 2 * from.len);
}

/** The first field of `type` in a received frame, or chunk_empty. */
static chunk_t field(frame_t *f, uint16_t type)
{
	size_t at = HEADER_LEN;

	while (at + 4 <= f->len)
	{
		uint16_t t = untoh16(f->buf + at), l = untoh16(f->buf + at + 2);

		if (at + 4 + l > f->len)
		{
			break;
		}
		if (t == type)
		{
			return chunk_create(f->buf + at + 4, l);
		}
		at += 4 + l;
	}
	return chunk_empty;
}

static bool field_u32(frame_t *f, uint16_t type, uint32_t *v)
{
	chunk_t c = field(f, type);

	if (c.len != 4)
	{
		return FALSE;
	}
	*v = untoh32(c.ptr);
	return TRUE;
}

static bool field_u64(frame_t *f, uint16_t type, uint64_t *v)
{
	chunk_t c = field(f, type);

	if (c.len != 8)
	{
		return FALSE;
	}
	*v = untoh64(c.ptr);
	return TRUE;
}

/** An installed SA, remembered to have charon rekey it after espgw restarts. */
typedef struct {
	uint8_t proto;
	uint32_t spi;
	host_t *dst;
} sa_entry_t;

static void sa_entry_destroy(sa_entry_t *e)
{
	e->dst->destroy(e->dst);
	free(e);
}

/** An installed policy and its references, to install again after espgw restarts. */
typedef struct {
	policy_dir_t dir;
	traffic_selector_t *src_ts;
	traffic_selector_t *dst_ts;
	frame_t *add;
	u_int refs;
} policy_entry_t;

static void policy_entry_destroy(policy_entry_t *e)
{
	e->src_ts->destroy(e->src_ts);
	e->dst_ts->destroy(e->dst_ts);
	free(e->add);
	free(e);
}

typedef struct private_kernel_espgw_ipsec_t private_kernel_espgw_ipsec_t;

struct private_kernel_espgw_ipsec_t {
	kernel_espgw_ipsec_t public;
	/** espgw's keying socket. */
	char *path;
	/** The connection; -1 while there is none. */
	int fd;
	/** Serialises requests: one is in flight at a time. */
	mutex_t *request;
	/** Guards fd, the reply hand-over and the remembered SAs and policies. */
	mutex_t *mutex;
	condvar_t *replied;
	uint32_t next_id;
	uint32_t waiting;
	bool have_reply;
	frame_t reply;
	linked_list_t *sas;
	linked_list_t *policies;
	thread_t *reader;
};

static bool write_all(int fd, uint8_t *p, size_t len)
{
	while (len)
	{
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
		{
			continue;
		}
		if (n <= 0)
		{
			return FALSE;
		}
		p += n;
		len -= n;
	}
	return TRUE;
}

/** Reads one whole frame, or fails (end of stream, error, bad framing). */
static bool read_frame(int fd, frame_t *f)
{
	size_t need = 4;

	f->len = 0;
	while (f->len < need)
	{
		ssize_t n;
		bool old = thread_cancelability(TRUE);

		n = recv(fd, f->buf + f->len, need - f->len, 0);
		thread_cancelability(old);
		if (n < 0 && errno == EINTR)
		{
			continue;
		}
		if (n <= 0)
		{
			return FALSE;
		}
		f->len += n;
		if (need == 4 && f->len == 4)
		{
			uint32_t len = untoh32(f->buf);

			if (len < HEADER_LEN - 4 || len > MAX_FRAME - 4)
			{
				return FALSE;
			}
			need = 4 + len;
		}
	}
	return f->buf[4] == CONTRACT_VERSION;
}

static status_t status_of(frame_t *f)
{
	chunk_t code, msg;

	if (f->buf[5] == K_OK)
	{
		return SUCCESS;
	}
	code = field(f, F_ERROR_CODE);
	msg = field(f, F_MESSAGE);
	DBG1(DBG_KNL, "espgw refused a request: %.*s", (int)msg.len, msg.ptr);
	switch (code.len == 2 ? untoh16(code.ptr) : 1)
	{
		case 2:
			return NOT_FOUND;
		case 3:
			return NOT_SUPPORTED;
		case 4:
			return INVALID_ARG;
		case 5:
			return ALREADY_DONE;
		default:
			return FAILED;
	}
}

/**
 * Sends `f` as a request and waits for its reply (copied to `out` if given). The frame is
 * wiped afterwards: it may hold keys.
 */
static status_t request(private_kernel_espgw_ipsec_t *this, frame_t *f, frame_t *out)
{
	status_t status = FAILED;
	uint32_t id;

	if (f->overflow)
	{
		memwipe(f->buf, f->len);
		return INVALID_ARG;
	}
	htoun32(f->buf, f->len - 4);
	this->request->lock(this->request);
	this->mutex->lock(this->mutex);
	id = ++this->next_id;
	htoun32(f->buf + 8, id);
	this->waiting = id;
	this->have_reply = FALSE;
	if (this->fd < 0 || !write_all(this->fd, f->buf, f->len))
	{
		DBG1(DBG_KNL, "espgw is not connected (keying socket %s)", this->path);
		this->waiting = 0;
		this->mutex->unlock(this->mutex);
		this->request->unlock(this->request);
		memwipe(f->buf, f->len);
		return FAILED;
	}
	memwipe(f->buf, f->len);
	while (!this->have_reply && this->fd >= 0)
	{
		if (this->replied->timed_wait(this->replied, this->mutex, REPLY_TIMEOUT_MS))
		{
			DBG1(DBG_KNL, "espgw did not answer within %d ms", REPLY_TIMEOUT_MS);
			break;
		}
	}
	if (this->have_reply)
	{
		status = status_of(&this->reply);
		if (out)
		{
			memcpy(out->buf, this->reply.buf, this->reply.len);
			out->len = this->reply.len;
		}
	}
	this->waiting = 0;
	this->mutex->unlock(this->mutex);
	this->request->unlock(this->request);
	return status;
}

static void put_sa_id(frame_t *f, kernel_ipsec_sa_id_t *id)
{
	put_host(f, F_SRC, id->src);
	put_host(f, F_DST, id->dst);
	put_u32(f, F_SPI, ntohl(id->spi));
	put_u8(f, F_PROTO, id->proto);
}

METHOD(kernel_ipsec_t, get_features, kernel_feature_t,
	private_kernel_espgw_ipsec_t *this)
{
	/* None of charon's special cases: no TFC padding, no exclude routes, no forced UDP
	 * encapsulation, policy updates welcome. */
	return 0;
}

METHOD(kernel_ipsec_t, get_spi, status_t,
	private_kernel_espgw_ipsec_t *this, host_t *src, host_t *dst,
	uint8_t protocol, uint32_t *spi)
{
	frame_t *f, *r;
	status_t status;
	uint32_t v;

	INIT(f);
	INIT(r);
	frame_init(f, K_GET_SPI);
	put_host(f, F_SRC, src);
	put_host(f, F_DST, dst);
	put_u8(f, F_PROTO, protocol);
	status = request(this, f, r);
	if (status == SUCCESS)
	{
		if (field_u32(r, F_SPI, &v))
		{
			*spi = htonl(v);
		}
		else
		{
			status = FAILED;
		}
	}
	free(f);
	free(r);
	return status;
}

METHOD(kernel_ipsec_t, get_cpi, status_t,
	private_kernel_espgw_ipsec_t *this, host_t *src, host_t *dst,
	uint16_t *cpi)
{
	/* espgw has no IPComp. */
	return NOT_SUPPORTED;
}

static void put_lifetime(frame_t *f, lifetime_cfg_t *l)
{
	uint8_t b[48];

	htoun64(b, l ? l->bytes.rekey : 0);
	htoun64(b + 8, l ? l->bytes.life : 0);
	htoun64(b + 16, l ? l->packets.rekey : 0);
	htoun64(b + 24, l ? l->packets.life : 0);
	htoun64(b + 32, l ? l->time.rekey : 0);
	htoun64(b + 40, l ? l->time.life : 0);
	put(f, F_LIFETIME, b, sizeof(b));
}

static void put_ts_list(frame_t *f, uint16_t type, linked_list_t *list)
{
	enumerator_t *e;
	traffic_selector_t *ts;

	if (!list)
	{
		return;
	}
	e = list->create_enumerator(list);
	while (e->enumerate(e, &ts))
	{
		put_ts(f, type, ts);
	}
	e->destroy(e);
}

static void remember_sa(private_kernel_espgw_ipsec_t *this, kernel_ipsec_sa_id_t *id)
{
	sa_entry_t *e;

	INIT(e,
		.proto = id->proto,
		.spi = id->spi,
		.dst = id->dst->clone(id->dst),
	);
	this->mutex->lock(this->mutex);
	this->sas->insert_last(this->sas, e);
	this->mutex->unlock(this->mutex);
}

static void forget_sa(private_kernel_espgw_ipsec_t *this, uint8_t proto, uint32_t spi,
					  host_t *dst)
{
	enumerator_t *en;
	sa_entry_t *e;

	this->mutex->lock(this->mutex);
	en = this->sas->create_enumerator(this->sas);
	while (en->enumerate(en, &e))
	{
		if (e->proto == proto && e->spi == spi && e->dst->ip_equals(e->dst, dst))
		{
			this->sas->remove_at(this->sas, en);
			sa_entry_destroy(e);
			break;
		}
	}
	en->destroy(en);
	this->mutex->unlock(this->mutex);
}

METHOD(kernel_ipsec_t, add_sa, status_t,
	private_kernel_espgw_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_add_sa_t *data)
{
	frame_t *f;
	status_t status;

	if (data->ipcomp != IPCOMP_NONE || data->mark.value || id->mark.value || id->if_id)
	{
		DBG1(DBG_KNL, "espgw: IPComp, marks and interface IDs are not supported");
		return NOT_SUPPORTED;
	}
	if (data->mode != MODE_TRANSPORT && data->mode != MODE_TUNNEL)
	{
		DBG1(DBG_KNL, "espgw: only tunnel and transport mode");
		return NOT_SUPPORTED;
	}
	INIT(f);
	frame_init(f, K_ADD_SA);
	put_sa_id(f, id);
	put_u32(f, F_REQID, data->reqid);
	put_u8(f, F_MODE, data->mode == MODE_TUNNEL ? 2 : 1);
	put_u16(f, F_ENC_ALG, data->enc_alg == ENCR_UNDEFINED ? 0 : data->enc_alg);
	put(f, F_ENC_KEY, data->enc_key.ptr, data->enc_key.len);
	put_u16(f, F_INT_ALG, data->int_alg == AUTH_UNDEFINED ? 0 : data->int_alg);
	put(f, F_INT_KEY, data->int_key.ptr, data->int_key.len);
	put_u32(f, F_REPLAY_WINDOW, data->replay_window);
	if (data->encap)
	{
		uint8_t b[4];
		htoun16(b, id->src->get_port(id->src));
		htoun16(b + 2, id->dst->get_port(id->dst));
		put(f, F_ENCAP, b, 4);
	}
	put_u8(f, F_ESN, data->esn);
	put_u8(f, F_INBOUND, data->inbound);
	put_lifetime(f, data->lifetime);
	put_ts_list(f, F_SRC_TS, data->src_ts);
	put_ts_list(f, F_DST_TS, data->dst_ts);
	status = request(this, f, NULL);
	free(f);
	if (status == SUCCESS)
	{
		remember_sa(this, id);
	}
	return status;
}

METHOD(kernel_ipsec_t, update_sa, status_t,
	private_kernel_espgw_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_update_sa_t *data)
{
	frame_t *f;
	status_t status;

	INIT(f);
	frame_init(f, K_UPDATE_SA);
	put_sa_id(f, id);
	put_host(f, F_NEW_SRC, data->new_src);
	put_host(f, F_NEW_DST, data->new_dst);
	if (data->new_encap)
	{
		uint8_t b[4];
		htoun16(b, data->new_src->get_port(data->new_src));
		htoun16(b + 2, data->new_dst->get_port(data->new_dst));
		put(f, F_ENCAP, b, 4);
	}
	status = request(this, f, NULL);
	free(f);
	if (status == SUCCESS && !id->dst->ip_equals(id->dst, data->new_dst))
	{
		kernel_ipsec_sa_id_t moved = *id;

		forget_sa(this, id->proto, id->spi, id->dst);
		moved.dst = data->new_dst;
		remember_sa(this, &moved);
	}
	return status;
}

METHOD(kernel_ipsec_t, query_sa, status_t,
	private_kernel_espgw_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_query_sa_t *data, uint64_t *bytes, uint64_t *packets,
	time_t *time)
{
	frame_t *f, *r;
	status_t status;
	uint64_t b = 0, p = 0, idle;

	INIT(f);
	INIT(r);
	frame_init(f, K_QUERY_SA);
	put_sa_id(f, id);
	status = request(this, f, r);
	if (status == SUCCESS)
	{
		field_u64(r, F_BYTES, &b);
		field_u64(r, F_PACKETS, &p);
		if (bytes)
		{
			*bytes = b;
		}
		if (packets)
		{
			*packets = p;
		}
		if (time)
		{
			/* charon compares use times with time_monotonic(). */
			*time = field_u64(r, F_IDLE, &idle) ? time_monotonic(NULL) - (time_t)idle : 0;
		}
	}
	free(f);
	free(r);
	return status;
}

METHOD(kernel_ipsec_t, del_sa, status_t,
	private_kernel_espgw_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_del_sa_t *data)
{
	frame_t *f;
	status_t status;

	INIT(f);
	frame_init(f, K_DEL_SA);
	put_sa_id(f, id);
	status = request(this, f, NULL);
	free(f);
	forget_sa(this, id->proto, id->spi, id->dst);
	return status;
}

METHOD(kernel_ipsec_t, flush_sas, status_t,
	private_kernel_espgw_ipsec_t *this)
{
	frame_t *f;
	status_t status;

	INIT(f);
	frame_init(f, K_FLUSH_SAS);
	status = request(this, f, NULL);
	free(f);
	this->mutex->lock(this->mutex);
	this->sas->destroy_function(this->sas, (void*)sa_entry_destroy);
	this->sas = linked_list_create();
	this->mutex->unlock(this->mutex);
	return status;
}

/** Lower wins, as in kernel-netlink: by class, then the more specific selectors. */
static uint32_t priority_of(kernel_ipsec_policy_id_t *id, kernel_ipsec_manage_policy_t *data)
{
	uint32_t base = 200000;
	uint8_t smask = 0, dmask = 0;
	host_t *net;

	if (data->manual_prio)
	{
		return data->manual_prio;
	}
	switch (data->prio)
	{
		case POLICY_PRIORITY_PASS:
			base = 100000;
			break;
		case POLICY_PRIORITY_FALLBACK:
			base = 400000;
			break;
		default:
			break;
	}
	if (id->src_ts->to_subnet(id->src_ts, &net, &smask))
	{
		net->destroy(net);
	}
	if (id->dst_ts->to_subnet(id->dst_ts, &net, &dmask))
	{
		net->destroy(net);
	}
	return base - (smask + dmask) * 256 - (id->src_ts->get_protocol(id->src_ts) ? 128 : 0);
}

static void put_policy_id(frame_t *f, kernel_ipsec_policy_id_t *id)
{
	put_u8(f, F_DIRECTION, id->dir == POLICY_IN ? 0 : id->dir == POLICY_OUT ? 1 : 2);
	put_ts(f, F_SRC_TS, id->src_ts);
	put_ts(f, F_DST_TS, id->dst_ts);
}

static policy_entry_t *find_policy(private_kernel_espgw_ipsec_t *this,
								   kernel_ipsec_policy_id_t *id, enumerator_t **at)
{
	enumerator_t *en;
	policy_entry_t *e;

	en = this->policies->create_enumerator(this->policies);
	while (en->enumerate(en, &e))
	{
		if (e->dir == id->dir && e->src_ts->equals(e->src_ts, id->src_ts) &&
			e->dst_ts->equals(e->dst_ts, id->dst_ts))
		{
			*at = en;
			return e;
		}
	}
	en->destroy(en);
	*at = NULL;
	return NULL;
}

static void remember_policy(private_kernel_espgw_ipsec_t *this, kernel_ipsec_policy_id_t *id,
							frame_t *add)
{
	enumerator_t *at;
	policy_entry_t *e;

	this->mutex->lock(this->mutex);
	e = find_policy(this, id, &at);
	if (e)
	{
		at->destroy(at);
		e->refs++;
		free(e->add);
		e->add = add;
	}
	else
	{
		INIT(e,
			.dir = id->dir,
			.src_ts = id->src_ts->clone(id->src_ts),
			.dst_ts = id->dst_ts->clone(id->dst_ts),
			.add = add,
			.refs = 1,
		);
		this->policies->insert_last(this->policies, e);
	}
	this->mutex->unlock(this->mutex);
}

static void forget_policy(private_kernel_espgw_ipsec_t *this, kernel_ipsec_policy_id_t *id)
{
	enumerator_t *at;
	policy_entry_t *e;

	this->mutex->lock(this->mutex);
	e = find_policy(this, id, &at);
	if (e)
	{
		if (--e->refs == 0)
		{
			this->policies->remove_at(this->policies, at);
			policy_entry_destroy(e);
		}
		at->destroy(at);
	}
	this->mutex->unlock(this->mutex);
}

METHOD(kernel_ipsec_t, add_policy, status_t,
	private_kernel_espgw_ipsec_t *this, kernel_ipsec_policy_id_t *id,
	kernel_ipsec_manage_policy_t *data)
{
	frame_t *f, *copy;
	status_t status;

	if (id->mark.value || id->if_id || id->interface || id->label)
	{
		DBG1(DBG_KNL, "espgw: policy marks, interface IDs, interfaces and labels are not "
			 "supported");
		return NOT_SUPPORTED;
	}
	INIT(f);
	frame_init(f, K_ADD_POLICY);
	put_policy_id(f, id);
	put_u8(f, F_POLICY_TYPE, data->type == POLICY_IPSEC ? 1 : data->type == POLICY_PASS ? 2 : 3);
	put_u32(f, F_PRIORITY, priority_of(id, data));
	if (data->sa)
	{
		put_u32(f, F_REQID, data->sa->reqid);
		if (data->sa->esp.use && data->sa->esp.spi)
		{
			put_u32(f, F_ESP_SPI, ntohl(data->sa->esp.spi));
		}
		if (data->sa->ah.use && data->sa->ah.spi)
		{
			put_u32(f, F_AH_SPI, ntohl(data->sa->ah.spi));
		}
	}
	if (data->src && data->dst)
	{
		put_host(f, F_SRC, data->src);
		put_host(f, F_DST, data->dst);
	}
	/* Policies hold no keys: a copy is kept to install them again after a restart. */
	copy = malloc(sizeof(*copy));
	memcpy(copy, f, sizeof(*copy));
	status = request(this, f, NULL);
	free(f);
	if (status == SUCCESS)
	{
		remember_policy(this, id, copy);
	}
	else
	{
		free(copy);
	}
	return status;
}

METHOD(kernel_ipsec_t, query_policy, status_t,
	private_kernel_espgw_ipsec_t *this, kernel_ipsec_policy_id_t *id,
	kernel_ipsec_query_policy_t *data, time_t *use_time)
{
	frame_t *f, *r;
	status_t status;
	uint64_t idle;

	INIT(f);
	INIT(r);
	frame_init(f, K_QUERY_POLICY);
	put_policy_id(f, id);
	status = request(this, f, r);
	if (status == SUCCESS && use_time)
	{
		*use_time = field_u64(r, F_IDLE, &idle) ? time_monotonic(NULL) - (time_t)idle : 0;
	}
	free(f);
	free(r);
	return status;
}

METHOD(kernel_ipsec_t, del_policy, status_t,
	private_kernel_espgw_ipsec_t *this, kernel_ipsec_policy_id_t *id,
	kernel_ipsec_manage_policy_t *data)
{
	frame_t *f;
	status_t status;

	INIT(f);
	frame_init(f, K_DEL_POLICY);
	put_policy_id(f, id);
	/* Which CHILD_SA lets go of the policy: espgw drops that reference, not another. */
	if (data->sa)
	{
		if (data->sa->esp.use && data->sa->esp.spi)
		{
			put_u32(f, F_ESP_SPI, ntohl(data->sa->esp.spi));
		}
		if (data->sa->ah.use && data->sa->ah.spi)
		{
			put_u32(f, F_AH_SPI, ntohl(data->sa->ah.spi));
		}
	}
	status = request(this, f, NULL);
	free(f);
	forget_policy(this, id);
	return status;
}

METHOD(kernel_ipsec_t, flush_policies, status_t,
	private_kernel_espgw_ipsec_t *this)
{
	frame_t *f;
	status_t status;

	INIT(f);
	frame_init(f, K_FLUSH_POLICIES);
	status = request(this, f, NULL);
	free(f);
	this->mutex->lock(this->mutex);
	this->policies->destroy_function(this->policies, (void*)policy_entry_destroy);
	this->policies = linked_list_create();
	this->mutex->unlock(this->mutex);
	return status;
}

METHOD(kernel_ipsec_t, bypass_socket, bool,
	private_kernel_espgw_ipsec_t *this, int fd, int family)
{
	/* espgw's policies apply to traffic it forwards, never to the host's own sockets:
	 * IKE from charon's socket is never protected, so there is nothing to exempt. */
	return TRUE;
}

METHOD(kernel_ipsec_t, enable_udp_decap, bool,
	private_kernel_espgw_ipsec_t *this, int fd, int family, uint16_t port)
{
	/* espgw takes ESP-in-UDP off the wire itself (UDP 4500 without the non-ESP marker);
	 * charon's socket sees only IKE. */
	return TRUE;
}

/** Connects and says HELLO; the connected socket, or -1. */
static int connect_espgw(private_kernel_espgw_ipsec_t *this)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	frame_t *f;
	int fd;
	bool ok;

	if (strlen(this->path) >= sizeof(addr.sun_path))
	{
		return -1;
	}
	strcpy(addr.sun_path, this->path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		return -1;
	}
	if (connect(fd, (struct sockaddr*)&addr, sizeof(addr)) != 0)
	{
		close(fd);
		return -1;
	}
	INIT(f);
	frame_init(f, K_HELLO);
	put_u8(f, F_VERSION, CONTRACT_VERSION);
	htoun32(f->buf, f->len - 4);
	ok = write_all(fd, f->buf, f->len) && read_frame(fd, f) && f->buf[5] == K_OK;
	free(f);
	if (!ok)
	{
		DBG1(DBG_KNL, "espgw at %s refused HELLO (contract version %d)", this->path,
			 CONTRACT_VERSION);
		close(fd);
		return -1;
	}
	return fd;
}

/**
 * After a reconnect: the policies again (they hold no keys), and a soft expire for every
 * SA installed before, so that charon rekeys them with fresh keys.
 */
static void *resync(private_kernel_espgw_ipsec_t *this)
{
	linked_list_t *frames = linked_list_create(), *sas = linked_list_create();
	enumerator_t *en;
	policy_entry_t *p;
	sa_entry_t *s;
	frame_t *f;
	u_int i;

	this->mutex->lock(this->mutex);
	en = this->policies->create_enumerator(this->policies);
	while (en->enumerate(en, &p))
	{
		for (i = 0; i < p->refs; i++)
		{
			f = malloc(sizeof(*f));
			memcpy(f, p->add, sizeof(*f));
			frames->insert_last(frames, f);
		}
	}
	en->destroy(en);
	en = this->sas->create_enumerator(this->sas);
	while (en->enumerate(en, &s))
	{
		sa_entry_t *c;
		INIT(c, .proto = s->proto, .spi = s->spi, .dst = s->dst->clone(s->dst));
		sas->insert_last(sas, c);
	}
	en->destroy(en);
	this->mutex->unlock(this->mutex);

	while (frames->remove_first(frames, (void**)&f) == SUCCESS)
	{
		request(this, f, NULL);
		free(f);
	}
	frames->destroy(frames);
	DBG1(DBG_KNL, "espgw reconnected: %d policies installed again, %d SAs to rekey",
		 this->policies->get_count(this->policies), sas->get_count(sas));
	while (sas->remove_first(sas, (void**)&s) == SUCCESS)
	{
		charon->kernel->expire(charon->kernel, s->proto, s->spi, s->dst, FALSE);
		sa_entry_destroy(s);
	}
	sas->destroy(sas);
	return NULL;
}

static host_t *host_of(chunk_t a)
{
	if (a.len == 4)
	{
		return host_create_from_chunk(AF_INET, a, 0);
	}
	if (a.len == 16)
	{
		return host_create_from_chunk(AF_INET6, a, 0);
	}
	return NULL;
}

static traffic_selector_t *ts_of(chunk_t b)
{
	size_t half;

	if (b.len != 5 + 8 && b.len != 5 + 32)
	{
		return NULL;
	}
	half = (b.len - 5) / 2;
	return traffic_selector_create_from_bytes(b.ptr[0],
				half == 4 ? TS_IPV4_ADDR_RANGE : TS_IPV6_ADDR_RANGE,
				chunk_create(b.ptr + 5, half), untoh16(b.ptr + 1),
				chunk_create(b.ptr + 5 + half, half), untoh16(b.ptr + 3));
}

static void handle_event(private_kernel_espgw_ipsec_t *this, frame_t *f)
{
	if (f->buf[5] == K_EXPIRE)
	{
		chunk_t proto = field(f, F_PROTO), hard = field(f, F_HARD);
		host_t *dst = host_of(field(f, F_DST));
		uint32_t spi;

		if (dst && proto.len == 1 && field_u32(f, F_SPI, &spi))
		{
			DBG1(DBG_KNL, "espgw: %s expire for SA %.8x", hard.len && hard.ptr[0] ? "hard"
				 : "soft", spi);
			charon->kernel->expire(charon->kernel, proto.ptr[0], htonl(spi), dst,
								   hard.len == 1 && hard.ptr[0]);
		}
		DESTROY_IF(dst);
	}
	else if (f->buf[5] == K_ACQUIRE)
	{
		kernel_acquire_data_t data = {
			.src = ts_of(field(f, F_SRC_TS)),
			.dst = ts_of(field(f, F_DST_TS)),
		};
		uint32_t reqid;

		if (field_u32(f, F_REQID, &reqid))
		{
			charon->kernel->acquire(charon->kernel, reqid, &data);
		}
		DESTROY_IF(data.src);
		DESTROY_IF(data.dst);
	}
}

/** The reader: (re)connects, hands replies to the waiting request, events to charon. */
static void *reader(private_kernel_espgw_ipsec_t *this)
{
	frame_t *f;
	bool first = TRUE;

	INIT(f);
	while (TRUE)
	{
		/* The first connection may have been made by the constructor. */
		int fd = first && this->fd >= 0 ? this->fd : connect_espgw(this);
		bool old;

		if (fd < 0)
		{
			old = thread_cancelability(TRUE);
			sleep(1);
			thread_cancelability(old);
			continue;
		}
		DBG1(DBG_KNL, "connected to espgw at %s", this->path);
		this->mutex->lock(this->mutex);
		this->fd = fd;
		this->mutex->unlock(this->mutex);
		if (!first)
		{
			thread_t *t = thread_create((thread_main_t)resync, this);
			if (t)
			{
				t->detach(t);
			}
		}
		first = FALSE;
		while (read_frame(fd, f))
		{
			uint8_t kind = f->buf[5];

			if (kind == K_OK || kind == K_ERROR)
			{
				this->mutex->lock(this->mutex);
				if (this->waiting && untoh32(f->buf + 8) == this->waiting)
				{
					memcpy(this->reply.buf, f->buf, f->len);
					this->reply.len = f->len;
					this->have_reply = TRUE;
					this->replied->broadcast(this->replied);
				}
				this->mutex->unlock(this->mutex);
			}
			else
			{
				handle_event(this, f);
			}
		}
		DBG1(DBG_KNL, "lost the connection to espgw at %s; reconnecting", this->path);
		this->mutex->lock(this->mutex);
		close(this->fd);
		this->fd = -1;
		this->replied->broadcast(this->replied);
		this->mutex->unlock(this->mutex);
	}
	free(f);
	return NULL;
}

METHOD(kernel_ipsec_t, destroy, void,
	private_kernel_espgw_ipsec_t *this)
{
	if (this->reader)
	{
		this->reader->cancel(this->reader);
		this->reader->join(this->reader);
	}
	if (this->fd >= 0)
	{
		close(this->fd);
	}
	this->sas->destroy_function(this->sas, (void*)sa_entry_destroy);
	this->policies->destroy_function(this->policies, (void*)policy_entry_destroy);
	this->replied->destroy(this->replied);
	this->mutex->destroy(this->mutex);
	this->request->destroy(this->request);
	free(this->path);
	free(this);
}

kernel_espgw_ipsec_t *kernel_espgw_ipsec_create()
{
	private_kernel_espgw_ipsec_t *this;

	INIT(this,
		.public = {
			.interface = {
				.get_features = _get_features,
				.get_spi = _get_spi,
				.get_cpi = _get_cpi,
				.add_sa = _add_sa,
				.update_sa = _update_sa,
				.query_sa = _query_sa,
				.del_sa = _del_sa,
				.flush_sas = _flush_sas,
				.add_policy = _add_policy,
				.query_policy = _query_policy,
				.del_policy = _del_policy,
				.flush_policies = _flush_policies,
				.bypass_socket = _bypass_socket,
				.enable_udp_decap = _enable_udp_decap,
				.destroy = _destroy,
			},
		},
		.path = strdup(lib->settings->get_str(lib->settings,
						"%s.plugins.kernel-espgw.socket", "/run/espgw/keying.sock",
						lib->ns)),
		.fd = -1,
		.request = mutex_create(MUTEX_TYPE_DEFAULT),
		.mutex = mutex_create(MUTEX_TYPE_DEFAULT),
		.replied = condvar_create(CONDVAR_TYPE_DEFAULT),
		.sas = linked_list_create(),
		.policies = linked_list_create(),
	);
	/* The first connection is tried here, so that charon's first calls find espgw
	 * where it runs already; the reader keeps it (and makes it again) from then on. */
	this->fd = connect_espgw(this);
	if (this->fd < 0)
	{
		DBG1(DBG_KNL, "espgw is not reachable at %s yet; retrying every second",
			 this->path);
	}
	this->reader = thread_create((thread_main_t)reader, this);
	if (!this->reader)
	{
		destroy(this);
		return NULL;
	}
	return &this->public;
}

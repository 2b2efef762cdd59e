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

#ifndef KERNEL_ESPGW_IPSEC_H_
#define KERNEL_ESPGW_IPSEC_H_

#include <kernel/kernel_ipsec.h>

typedef struct kernel_espgw_ipsec_t kernel_espgw_ipsec_t;

/** charon's kernel_ipsec_t, forwarded to espgw over its keying socket. */
struct kernel_espgw_ipsec_t {
	kernel_ipsec_t interface;
};

/** Connects to espgw (and keeps reconnecting); NULL only on allocation failure. */
kernel_espgw_ipsec_t *kernel_espgw_ipsec_create();

#endif /* KERNEL_ESPGW_IPSEC_H_ */

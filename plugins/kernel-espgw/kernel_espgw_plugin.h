/*
 * kernel-espgw: strongSwan's charon hands its SAs and policies to espgw.
 *
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

#ifndef KERNEL_ESPGW_PLUGIN_H_
#define KERNEL_ESPGW_PLUGIN_H_

#include <plugins/plugin.h>

typedef struct kernel_espgw_plugin_t kernel_espgw_plugin_t;

/** The plugin: registers the kernel_ipsec_t that talks to espgw. */
struct kernel_espgw_plugin_t {
	plugin_t plugin;
};

#endif /* KERNEL_ESPGW_PLUGIN_H_ */

/*
 * hook-domain.h -- the vGPUs a libvirt domain needs, read from its XML.
 *
 * A domain asks for vGPUs in its <metadata>, in vgmig's own namespace
 * (VGH_XMLNS), one <vgmig:vgpu> per device:
 *
 *   <metadata>
 *     <vgmig:vgpus xmlns:vgmig="https://vgmig.example/xmlns/vgpu/1">
 *       <vgmig:vgpu device="vgpu0" size="256M" page-size="64K"
 *                   backend="cpu" managed="yes"/>
 *     </vgmig:vgpus>
 *   </metadata>
 *
 * and attaches each one with a vfio-user-pci device in <qemu:commandline>
 * (`-device` followed by JSON, {"driver":"vfio-user-pci","id":"vgpu0",
 * "socket":{"type":"unix","path":"/run/vgmig/DOM/vgpu0.sock"}}, or by
 * keyval, vfio-user-pci,id=vgpu0,socket.type=unix,socket.path=...).
 * A vGPU names its device by id ("device"); vGPUs without one take the
 * remaining vfio-user-pci devices in command-line order.  vfio-user-pci
 * devices no vGPU claims are left alone.  The socket path is the one the
 * device gives.
 */
#ifndef VGMIG_HOOK_DOMAIN_H
#define VGMIG_HOOK_DOMAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define VGH_XMLNS      "https://vgmig.example/xmlns/vgpu/1"
#define VGH_QEMU_XMLNS "http://libvirt.org/schemas/domain/qemu/1.0"
#define VGH_MAX_VGPUS  16
/* sun_path holds 108 bytes with the terminating NUL. */
#define VGH_SOCKET_MAX 107

struct vgh_vgpu {
    char *device;       /* QEMU device id, or NULL when it has none */
    char *socket;       /* absolute path of the vfio-user socket */
    uint64_t size;      /* VRAM bytes */
    uint64_t page_size; /* dirty-tracking page bytes */
    char *backend;      /* VRAM backend name, e.g. "cpu" */
    bool managed;       /* the hook starts and stops its server */
};

struct vgh_domain {
    char *name;
    char *uuid;
    bool has_label; /* a DAC <seclabel> gave the QEMU user */
    uid_t uid;      /* the QEMU process's user and group, if has_label */
    gid_t gid;
    unsigned n_vgpus;
    struct vgh_vgpu vgpus[VGH_MAX_VGPUS];
};

/*
 * Parse the domain XML in @xml (@len bytes) into @dom.  A domain without
 * vgmig metadata parses with n_vgpus == 0.  Fails with -EINVAL naming the
 * offending element or attribute.  @dom must be released with
 * vgh_domain_clear() whatever the result.
 */
int vgh_domain_parse(const char *xml, size_t len, struct vgh_domain *dom,
                     struct vg_error *err);
void vgh_domain_clear(struct vgh_domain *dom);

/*
 * Parse a DAC label "+UID:+GID" or "USER:GROUP" (names looked up in the
 * system's databases).
 */
int vgh_parse_dac_label(const char *label, uid_t *uid, gid_t *gid,
                        struct vg_error *err);

/*
 * Read a -device argument: true if it is a vfio-user-pci device, with its
 * id (or NULL) and UNIX socket path (or NULL) in newly allocated strings.
 * Fails with -EINVAL on malformed JSON or a non-UNIX socket.
 */
int vgh_parse_device_arg(const char *arg, bool *is_vfio_user, char **id,
                         char **socket, struct vg_error *err);

#endif

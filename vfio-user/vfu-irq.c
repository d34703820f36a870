/*
 * vfu-irq.c -- the device's interrupts: the eventfds the client gives for
 * INTx and MSI-X (SET_IRQS, IRQ_INFO), INTx masking, and raising a vector
 * for the model.  Runs on the control loop today; raising is the device
 * thread's to do once it has one.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "vfu-eventfd.h"

void vfu_irq_raise(void *opaque, unsigned vector)
{
    struct vfu_server *srv = opaque;
    int msix = vector < VGPU_MSIX_VECTORS
                   ? srv->irq_fds[VFIO_PCI_MSIX_IRQ_INDEX][vector]
                   : -1;
    int intx = srv->irq_fds[VFIO_PCI_INTX_IRQ_INDEX][0];

    if (msix >= 0) {
        vfu_eventfd_signal(msix);
    } else if (intx >= 0 && !srv->intx_masked &&
               !pci_config_intx_disabled(&srv->cfg)) {
        srv->intx_masked = true; /* INTx is automasked until UNMASK */
        vfu_eventfd_signal(intx);
    } else {
        vg_trace("interrupt vector %u not delivered", vector);
    }
}

static void irqs_close(struct vfu_server *srv, unsigned index)
{
    for (unsigned i = 0; i < MAX_IRQ_VECTORS; i++) {
        if (srv->irq_fds[index][i] >= 0) {
            close(srv->irq_fds[index][i]);
            srv->irq_fds[index][i] = -1;
        }
    }
}

void vfu_irqs_close_all(struct vfu_server *srv)
{
    for (unsigned i = 0; i < NUM_IRQS; i++) {
        irqs_close(srv, i);
    }
}

int vfu_handle_irq_info(struct vfu_server *srv, const uint8_t *p, size_t len,
                        struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_irq_info info;
    int ret;

    ret = vfu_parse_irq_info(p, len, &srv->lim, &info, err);
    if (ret < 0) {
        return ret;
    }
    info.argsz = sizeof(info);
    info.count = srv->irq_count[info.index];
    info.flags = VFIO_IRQ_INFO_EVENTFD;
    if (info.index == VFIO_PCI_INTX_IRQ_INDEX) {
        info.flags |= VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED;
    } else {
        info.flags |= VFIO_IRQ_INFO_NORESIZE;
    }
    memcpy(vfu_payload(srv), &info, sizeof(info));
    r->len = sizeof(info);
    return 0;
}

/* SET_IRQS with DATA_EVENTFD and ACTION_TRIGGER: take the fds (none: the
 * range is de-assigned). */
static void irq_set_eventfds(struct vfu_server *srv,
                             const struct vfu_irq_set *s)
{
    for (uint32_t i = 0; i < s->count; i++) {
        int *slot = &srv->irq_fds[s->index][s->start + i];
        if (*slot >= 0) {
            close(*slot);
        }
        *slot = -1;
        if (srv->rx.nfds) {
            *slot = srv->rx.fds[i];
            srv->rx.fds[i] = -1; /* now owned by the IRQ table */
        }
    }
    if (s->index == VFIO_PCI_INTX_IRQ_INDEX) {
        srv->intx_masked = false;
    }
}

static int irq_set_action(struct vfu_server *srv, const struct vfu_irq_set *s,
                          const uint8_t *bools, struct vg_error *err)
{
    uint32_t action =
        s->flags & (VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK |
                    VFIO_IRQ_SET_ACTION_TRIGGER);

    if (action != VFIO_IRQ_SET_ACTION_TRIGGER &&
        s->index != VFIO_PCI_INTX_IRQ_INDEX) {
        return vg_error_set(err, ENOTSUP, "IRQ index %u cannot be masked",
                            s->index);
    }
    for (uint32_t i = 0; i < s->count; i++) {
        int fd = srv->irq_fds[s->index][s->start + i];
        if (bools && !bools[i]) {
            continue;
        }
        if (action == VFIO_IRQ_SET_ACTION_TRIGGER && fd >= 0) {
            vfu_eventfd_signal(fd);
        } else if (action != VFIO_IRQ_SET_ACTION_TRIGGER) {
            srv->intx_masked = action == VFIO_IRQ_SET_ACTION_MASK;
        }
    }
    return 0;
}

int vfu_handle_set_irqs(struct vfu_server *srv, const uint8_t *p, size_t len,
                        struct vfu_reply *r, struct vg_error *err)
{
    struct vfu_irq_set s;
    const uint8_t *bools;
    int ret;

    ret = vfu_parse_irq_set(p, len, &srv->lim, srv->rx.nfds, &s, &bools, err);
    if (ret < 0) {
        return ret;
    }
    if (s.count == 0) {
        irqs_close(srv, s.index);
        return 0;
    }
    if (s.flags & VFIO_IRQ_SET_DATA_EVENTFD) {
        if (!(s.flags & VFIO_IRQ_SET_ACTION_TRIGGER)) {
            return vg_error_set(err, ENOTSUP,
                                "eventfds for mask/unmask not supported");
        }
        for (unsigned i = 0; i < srv->rx.nfds; i++) { /* all or none */
            ret = vfu_eventfd_take(srv->rx.fds[i], err);
            if (ret < 0) {
                vg_error_prefix(err, "IRQ index %u vector %u", s.index,
                                s.start + i);
                return ret;
            }
        }
        irq_set_eventfds(srv, &s);
        return 0;
    }
    return irq_set_action(srv, &s, bools, err);
}

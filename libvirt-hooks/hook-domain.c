#include "hook-domain.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include <json-glib/json-glib.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>

#include "common/size.h"

/* ------------------------------------------------------------ devices -- */

/* A vfio-user-pci device found on the QEMU command line. */
struct dev {
    char *id;
    char *socket;
    bool claimed;
};

static int device_from_json(const char *arg, bool *is_vu, char **id,
                            char **socket, struct vg_error *err)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) gerr = NULL;
    JsonNode *root;
    JsonObject *obj, *sock;
    const char *type, *path;

    if (!json_parser_load_from_data(parser, arg, -1, &gerr)) {
        return vg_error_set(err, EINVAL, "-device '%s': not valid JSON: %s",
                            arg, gerr->message);
    }
    root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
        return vg_error_set(err, EINVAL, "-device '%s': not a JSON object",
                            arg);
    }
    obj = json_node_get_object(root);
    if (g_strcmp0(json_object_get_string_member_with_default(obj, "driver", ""),
                  "vfio-user-pci") != 0) {
        return 0;
    }
    *is_vu = true;
    if (json_object_has_member(obj, "id")) {
        *id = g_strdup(
            json_object_get_string_member_with_default(obj, "id", NULL));
    }
    if (!json_object_has_member(obj, "socket")) {
        return 0;
    }
    if (!JSON_NODE_HOLDS_OBJECT(json_object_get_member(obj, "socket"))) {
        return vg_error_set(err, EINVAL,
                            "-device '%s': \"socket\" is not an object", arg);
    }
    sock = json_object_get_object_member(obj, "socket");
    type = json_object_get_string_member_with_default(sock, "type", "");
    path = json_object_get_string_member_with_default(sock, "path", NULL);
    if (strcmp(type, "unix") != 0 || !path) {
        return vg_error_set(err, EINVAL,
                            "-device '%s': the socket must be "
                            "{\"type\":\"unix\",\"path\":...}",
                            arg);
    }
    *socket = g_strdup(path);
    return 0;
}

/* Split QEMU keyval text at ',' (",," is a literal comma). */
static GPtrArray *keyval_split(const char *arg)
{
    GPtrArray *parts = g_ptr_array_new_with_free_func(g_free);
    GString *cur = g_string_new(NULL);

    for (const char *p = arg; *p; p++) {
        if (*p == ',' && p[1] == ',') {
            g_string_append_c(cur, ',');
            p++;
        } else if (*p == ',') {
            g_ptr_array_add(parts, g_string_free(cur, FALSE));
            cur = g_string_new(NULL);
        } else {
            g_string_append_c(cur, *p);
        }
    }
    g_ptr_array_add(parts, g_string_free(cur, FALSE));
    return parts;
}

static int device_from_keyval(const char *arg, bool *is_vu, char **id,
                              char **socket, struct vg_error *err)
{
    g_autoptr(GPtrArray) parts = keyval_split(arg);
    const char *driver = NULL, *type = NULL, *path = NULL, *dev_id = NULL;

    for (guint i = 0; i < parts->len; i++) {
        const char *kv = parts->pdata[i];
        const char *eq = strchr(kv, '=');

        if (!eq) {
            if (i == 0) {
                driver = kv;
            }
            continue;
        }
        size_t klen = (size_t)(eq - kv);
        if (klen == 6 && strncmp(kv, "driver", 6) == 0) {
            driver = eq + 1;
        } else if (klen == 2 && strncmp(kv, "id", 2) == 0) {
            dev_id = eq + 1;
        } else if (klen == 11 && strncmp(kv, "socket.type", 11) == 0) {
            type = eq + 1;
        } else if (klen == 11 && strncmp(kv, "socket.path", 11) == 0) {
            path = eq + 1;
        }
    }
    if (g_strcmp0(driver, "vfio-user-pci") != 0) {
        return 0;
    }
    *is_vu = true;
    if (path && type && strcmp(type, "unix") != 0) {
        return vg_error_set(err, EINVAL,
                            "-device '%s': socket.type must be unix, not '%s'",
                            arg, type);
    }
    *id = g_strdup(dev_id);
    *socket = g_strdup(path);
    return 0;
}

int vgh_parse_device_arg(const char *arg, bool *is_vfio_user, char **id,
                         char **socket, struct vg_error *err)
{
    const char *p = arg;
    int ret;

    *is_vfio_user = false;
    *id = NULL;
    *socket = NULL;
    while (isspace((unsigned char)*p)) {
        p++;
    }
    ret = *p == '{' ? device_from_json(p, is_vfio_user, id, socket, err)
                    : device_from_keyval(p, is_vfio_user, id, socket, err);
    if (ret < 0) {
        g_free(*id);
        g_free(*socket);
        *id = *socket = NULL;
        *is_vfio_user = false;
    }
    return ret;
}

/* ----------------------------------------------------------- DAC label -- */

static bool parse_id(const char *text, unsigned long *out)
{
    char *end;

    if (!isdigit((unsigned char)*text)) {
        return false;
    }
    errno = 0;
    *out = strtoul(text, &end, 10);
    return errno == 0 && *end == '\0' && *out < (unsigned long)UINT32_MAX;
}

int vgh_parse_dac_label(const char *label, uid_t *uid, gid_t *gid,
                        struct vg_error *err)
{
    const char *colon = strchr(label, ':');
    g_autofree char *user = NULL;
    const char *group;
    unsigned long n;

    if (!colon || colon == label || !colon[1]) {
        return vg_error_set(err, EINVAL,
                            "DAC label '%s' is not USER:GROUP or +UID:+GID",
                            label);
    }
    user = g_strndup(label, (gsize)(colon - label));
    group = colon + 1;
    if (user[0] == '+') {
        if (!parse_id(user + 1, &n)) {
            return vg_error_set(err, EINVAL, "DAC label '%s': bad uid", label);
        }
        *uid = (uid_t)n;
    } else {
        struct passwd *pw = getpwnam(user);
        if (!pw) {
            return vg_error_set(err, ENOENT, "DAC label '%s': no user '%s'",
                                label, user);
        }
        *uid = pw->pw_uid;
    }
    if (group[0] == '+') {
        if (!parse_id(group + 1, &n)) {
            return vg_error_set(err, EINVAL, "DAC label '%s': bad gid", label);
        }
        *gid = (gid_t)n;
    } else {
        struct group *gr = getgrnam(group);
        if (!gr) {
            return vg_error_set(err, ENOENT, "DAC label '%s': no group '%s'",
                                label, group);
        }
        *gid = gr->gr_gid;
    }
    return 0;
}

/* -------------------------------------------------------------- domain -- */

static char *xpath_string(xmlXPathContextPtr ctx, const char *expr)
{
    xmlXPathObjectPtr obj = xmlXPathEvalExpression(BAD_CAST expr, ctx);
    char *out = NULL;

    if (obj && obj->type == XPATH_NODESET && obj->nodesetval &&
        obj->nodesetval->nodeNr > 0) {
        xmlChar *s = xmlNodeGetContent(obj->nodesetval->nodeTab[0]);
        if (s) {
            out = g_strdup(g_strstrip((char *)s));
            xmlFree(s);
        }
    }
    xmlXPathFreeObject(obj);
    return out;
}

static char *attr(xmlNodePtr node, const char *name)
{
    xmlChar *v = xmlGetProp(node, BAD_CAST name);
    char *out = v ? g_strdup((const char *)v) : NULL;

    xmlFree(v);
    return out;
}

static bool is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static int parse_vgpu(xmlNodePtr node, unsigned idx, struct vgh_vgpu *v,
                      struct vg_error *err)
{
    g_autofree char *size = attr(node, "size");
    g_autofree char *page = attr(node, "page-size");
    g_autofree char *managed = attr(node, "managed");
    int ret;

    if (!size) {
        return vg_error_set(err, EINVAL,
                            "<vgmig:vgpu> %u has no size attribute", idx);
    }
    ret = vg_parse_size(size, 1, UINT64_MAX, &v->size, err);
    if (ret == 0 && !is_pow2(v->size)) {
        ret = vg_error_set(err, EINVAL, "size %s is not a power of two", size);
    }
    if (ret < 0) {
        vg_error_prefix(err, "<vgmig:vgpu> %u: size", idx);
        return ret;
    }
    v->page_size = 64 << 10;
    if (page) {
        ret = vg_parse_size(page, 4 << 10, 2 << 20, &v->page_size, err);
        if (ret == 0 && !is_pow2(v->page_size)) {
            ret = vg_error_set(err, EINVAL, "%s is not a power of two", page);
        }
        if (ret < 0) {
            vg_error_prefix(err, "<vgmig:vgpu> %u: page-size (4K to 2M)", idx);
            return ret;
        }
    }
    if (v->size < v->page_size) {
        return vg_error_set(err, EINVAL,
                            "<vgmig:vgpu> %u: size %s is smaller than its "
                            "page size",
                            idx, size);
    }
    v->backend = attr(node, "backend");
    if (!v->backend) {
        v->backend = g_strdup("cpu");
    }
    for (const char *p = v->backend; *p; p++) {
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_') {
            return vg_error_set(err, EINVAL,
                                "<vgmig:vgpu> %u: backend '%s' is not a name",
                                idx, v->backend);
        }
    }
    if (!v->backend[0]) {
        return vg_error_set(err, EINVAL, "<vgmig:vgpu> %u: empty backend", idx);
    }
    if (!managed || strcmp(managed, "yes") == 0) {
        v->managed = true;
    } else if (strcmp(managed, "no") == 0) {
        v->managed = false;
    } else {
        return vg_error_set(err, EINVAL,
                            "<vgmig:vgpu> %u: managed must be yes or no, "
                            "not '%s'",
                            idx, managed);
    }
    v->device = attr(node, "device");
    return 0;
}

static int check_socket_path(const char *path, unsigned idx,
                             struct vg_error *err)
{
    if (path[0] != '/') {
        return vg_error_set(err, EINVAL,
                            "vGPU %u: socket path '%s' is not absolute", idx,
                            path);
    }
    if (strlen(path) > VGH_SOCKET_MAX) {
        return vg_error_set(err, ENAMETOOLONG,
                            "vGPU %u: socket path '%s' is longer than %d "
                            "bytes",
                            idx, path, VGH_SOCKET_MAX);
    }
    for (const char *p = path; *p; p++) {
        if (iscntrl((unsigned char)*p)) {
            return vg_error_set(err, EINVAL,
                                "vGPU %u: socket path has a control character",
                                idx);
        }
    }
    if (strstr(path, "/../") || g_str_has_suffix(path, "/..") ||
        g_str_has_suffix(path, "/")) {
        return vg_error_set(err, EINVAL,
                            "vGPU %u: socket path '%s' is not a plain file "
                            "name",
                            idx, path);
    }
    return 0;
}

/* Collect the vfio-user-pci devices of <qemu:commandline>. */
static int collect_devices(xmlXPathContextPtr ctx, GArray *devs,
                           struct vg_error *err)
{
    xmlXPathObjectPtr obj = xmlXPathEvalExpression(
        BAD_CAST "/domain/qemu:commandline/qemu:arg/@value", ctx);
    int ret = 0;

    if (!obj || !obj->nodesetval) {
        xmlXPathFreeObject(obj);
        return 0;
    }
    for (int i = 0; i + 1 < obj->nodesetval->nodeNr && ret == 0; i++) {
        xmlChar *opt = xmlNodeGetContent(obj->nodesetval->nodeTab[i]);
        bool is_dev = opt && (xmlStrcmp(opt, BAD_CAST "-device") == 0 ||
                              xmlStrcmp(opt, BAD_CAST "--device") == 0);
        xmlFree(opt);
        if (!is_dev) {
            continue;
        }
        xmlChar *val = xmlNodeGetContent(obj->nodesetval->nodeTab[++i]);
        struct dev d = {0};
        bool vu = false;
        ret =
            vgh_parse_device_arg((const char *)val, &vu, &d.id, &d.socket, err);
        xmlFree(val);
        if (ret == 0 && vu) {
            g_array_append_val(devs, d);
        }
    }
    xmlXPathFreeObject(obj);
    return ret;
}

static void free_devs(GArray *devs)
{
    for (guint i = 0; i < devs->len; i++) {
        struct dev *d = &g_array_index(devs, struct dev, i);
        g_free(d->id);
        g_free(d->socket);
    }
    g_array_free(devs, TRUE);
}

/* Give every vGPU its device: by id first, then in order. */
static int pair_devices(struct vgh_domain *dom, GArray *devs,
                        struct vg_error *err)
{
    for (unsigned i = 0; i < dom->n_vgpus; i++) {
        struct vgh_vgpu *v = &dom->vgpus[i];
        struct dev *found = NULL;

        for (guint j = 0; j < devs->len && v->device; j++) {
            struct dev *d = &g_array_index(devs, struct dev, j);
            if (!d->claimed && g_strcmp0(d->id, v->device) == 0) {
                found = d;
                break;
            }
        }
        if (v->device && !found) {
            return vg_error_set(err, ENOENT,
                                "vGPU %u: no vfio-user-pci device with "
                                "id '%s' in <qemu:commandline>",
                                i, v->device);
        }
        if (found) {
            found->claimed = true;
            v->socket = g_strdup(found->socket);
        }
    }
    for (unsigned i = 0; i < dom->n_vgpus; i++) {
        struct vgh_vgpu *v = &dom->vgpus[i];
        if (v->device) {
            continue;
        }
        for (guint j = 0; j < devs->len; j++) {
            struct dev *d = &g_array_index(devs, struct dev, j);
            /* Devices with an id wait for a vGPU that names them. */
            if (!d->claimed && !d->id) {
                d->claimed = true;
                v->socket = g_strdup(d->socket);
                v->device = g_strdup(d->id);
                break;
            }
        }
        if (!v->socket) {
            for (guint j = 0; j < devs->len; j++) {
                struct dev *d = &g_array_index(devs, struct dev, j);
                if (!d->claimed) {
                    d->claimed = true;
                    v->socket = g_strdup(d->socket);
                    v->device = g_strdup(d->id);
                    break;
                }
            }
        }
    }
    for (unsigned i = 0; i < dom->n_vgpus; i++) {
        struct vgh_vgpu *v = &dom->vgpus[i];
        int ret;
        if (!v->socket) {
            return vg_error_set(err, ENOENT,
                                "vGPU %u: no vfio-user-pci device with a "
                                "UNIX socket in <qemu:commandline> for it",
                                i);
        }
        ret = check_socket_path(v->socket, i, err);
        if (ret < 0) {
            return ret;
        }
        for (unsigned j = 0; j < i; j++) {
            if (strcmp(dom->vgpus[j].socket, v->socket) == 0) {
                return vg_error_set(err, EINVAL,
                                    "vGPUs %u and %u share the socket %s", j, i,
                                    v->socket);
            }
        }
    }
    return 0;
}

static void silence_xml_errors(void *ctx, const char *msg, ...)
{
    (void)ctx;
    (void)msg;
}

int vgh_domain_parse(const char *xml, size_t len, struct vgh_domain *dom,
                     struct vg_error *err)
{
    xmlDocPtr doc;
    xmlXPathContextPtr ctx = NULL;
    xmlXPathObjectPtr obj = NULL;
    GArray *devs = NULL;
    char *label = NULL;
    int ret = 0;

    memset(dom, 0, sizeof(*dom));
    xmlSetGenericErrorFunc(NULL, silence_xml_errors);
    doc = xmlReadMemory(xml, (int)len, "domain.xml", NULL,
                        XML_PARSE_NONET | XML_PARSE_NOERROR |
                            XML_PARSE_NOWARNING);
    if (!doc) {
        const xmlError *e = xmlGetLastError();
        return vg_error_set(err, EINVAL, "domain XML is not well-formed: %s",
                            e && e->message ? g_strstrip(e->message)
                                            : "parse error");
    }
    ctx = xmlXPathNewContext(doc);
    if (!ctx || xmlXPathRegisterNs(ctx, BAD_CAST "vgmig", BAD_CAST VGH_XMLNS) ||
        xmlXPathRegisterNs(ctx, BAD_CAST "qemu", BAD_CAST VGH_QEMU_XMLNS)) {
        ret = vg_error_set(err, ENOMEM, "cannot set up XPath");
        goto out;
    }
    dom->name = xpath_string(ctx, "/domain/name");
    dom->uuid = xpath_string(ctx, "/domain/uuid");
    if (!dom->name || !dom->name[0]) {
        ret = vg_error_set(err, EINVAL, "domain XML has no <name>");
        goto out;
    }
    label = xpath_string(ctx, "/domain/seclabel[@model='dac']/label");
    if (label) {
        ret = vgh_parse_dac_label(label, &dom->uid, &dom->gid, err);
        if (ret < 0) {
            goto out;
        }
        dom->has_label = true;
    }

    obj = xmlXPathEvalExpression(
        BAD_CAST "/domain/metadata/vgmig:vgpus/vgmig:vgpu", ctx);
    if (!obj || !obj->nodesetval || obj->nodesetval->nodeNr == 0) {
        goto out; /* no vGPU: nothing for the hook to do */
    }
    if (obj->nodesetval->nodeNr > VGH_MAX_VGPUS) {
        ret = vg_error_set(err, E2BIG, "%d vGPUs; at most %d are supported",
                           obj->nodesetval->nodeNr, VGH_MAX_VGPUS);
        goto out;
    }
    for (int i = 0; i < obj->nodesetval->nodeNr; i++) {
        ret = parse_vgpu(obj->nodesetval->nodeTab[i], (unsigned)i,
                         &dom->vgpus[i], err);
        dom->n_vgpus = (unsigned)i + 1;
        if (ret < 0) {
            goto out;
        }
    }
    devs = g_array_new(FALSE, TRUE, sizeof(struct dev));
    ret = collect_devices(ctx, devs, err);
    if (ret == 0) {
        ret = pair_devices(dom, devs, err);
    }
out:
    if (ret < 0 && dom->name) {
        vg_error_prefix(err, "domain '%s'", dom->name);
    }
    if (devs) {
        free_devs(devs);
    }
    g_free(label);
    xmlXPathFreeObject(obj);
    xmlXPathFreeContext(ctx);
    xmlFreeDoc(doc);
    return ret;
}

void vgh_domain_clear(struct vgh_domain *dom)
{
    for (unsigned i = 0; i < dom->n_vgpus; i++) {
        g_free(dom->vgpus[i].device);
        g_free(dom->vgpus[i].socket);
        g_free(dom->vgpus[i].backend);
    }
    g_free(dom->name);
    g_free(dom->uuid);
    memset(dom, 0, sizeof(*dom));
}

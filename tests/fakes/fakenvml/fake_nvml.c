/*
 * fake_nvml.c: a fake libnvidia-ml.so.1 for tests.
 *
 * The real pynvml bindings load this library instead of NVIDIA's, so the exporter's NVML
 * code runs unchanged against GPUs described in a text file. The file is named by the
 * environment variable FAKE_NVML_STATE (read at every nvmlInitWithFlags) and is re-read
 * whenever its (mtime ns, size, inode) changes, so a test moves the node forward in time,
 * loses a GPU or raises an Xid by rewriting it (atomically: write a temp file, rename).
 *
 * Build:   cc -shared -fPIC -O2 -Wall -Wextra -o DIR/libnvidia-ml.so.1 fake_nvml.c -lpthread
 * Old driver variant: add -DFAKE_NVML_OLD_DRIVER; it does not export
 * nvmlDeviceGetMemoryInfo_v2 nor nvmlDeviceGetCurrentClocksEventReasons (pre-R510/R535).
 * Both variants have field values and GPM.
 *
 * State file format: one directive per line; blank lines and lines starting with '#' are
 * ignored; integers are decimal, or hex with 0x. Node-wide lines:
 *
 *   driver_version <text>              e.g. 550.54.15 (nvmlSystemGetDriverVersion)
 *   nvml_version <text>                optional; default "12.<driver_version>"
 *   delay_ms <n>                       sleep at the start of every call but nvmlErrorString
 *   hang <0|1>                         1: every call but nvmlErrorString (nvmlInit included)
 *                                      blocks, re-reading the file every 10 ms without the
 *                                      lock, until a rewrite says `hang 0` (a driver stuck in
 *                                      the kernel); the call then goes on as usual
 *   init_error <code>                  nvmlInit fails with this nvmlReturn_t
 *   error <nvml function name> <code>  before any `device` line: a node-wide function
 *                                      (nvmlDeviceGetCount_v2, nvmlSystemGetDriverVersion)
 *                                      returns <code>
 *
 * `device <index>` opens a GPU block (indexes 0, 1, 2, ... in order); the lines after it
 * describe that GPU:
 *
 *   uuid <text>                        GPU-...
 *   name <text to end of line>         NVIDIA H100 80GB HBM3
 *   pci_bus_id <text>                  00000000:18:00.0
 *   minor <n|none>                     N of /dev/nvidiaN (nvmlDeviceGetMinorNumber); `none`:
 *                                      NOT_SUPPORTED, a driver that will not say. Absent: the
 *                                      index with its lowest bit flipped (0<->1, 2<->3, ...),
 *                                      an order unlike the index, as drivers may number them,
 *                                      so code that takes one for the other fails. Two GPUs
 *                                      with one minor number are a parse error
 *   lost <0|1>                         1: every call on the GPU returns GPU_IS_LOST (15)
 *   memory <total> <reserved> <used>   bytes; v2 `used` excludes reserved, v1 includes it
 *   utilization <gpu%> <memory%>
 *   temperature <celsius>
 *   power <milliwatts>
 *   power_limit <milliwatts>
 *   energy <millijoules>
 *   clocks <sm MHz> <memory MHz>
 *   max_clocks <sm MHz> <memory MHz>   optional; default: the current clocks
 *   clock_events <mask>                nvmlClocksEventReason* bits
 *   ecc <corrected> <uncorrected>      volatile counters (aggregate reads the same)
 *   codec <encoder %> <decoder %>      video engine utilization (sampling period 100000 us)
 *   field <fieldId> <scopeId> <bits> <value>
 *                                      one field value of nvmlDeviceGetFieldValues: scopeId 0,
 *                                      or the NVLink of a per-link field (the NVLink error
 *                                      counters _L0.._L11 have a fieldId per link, scopeId 0);
 *                                      bits 32 (answered as NVML_VALUE_TYPE_UNSIGNED_INT,
 *                                      value < 2^32) or 64 (UNSIGNED_LONG_LONG); at most 256
 *                                      per device, each (fieldId, scopeId) once
 *   gpm_supported <0|1>                GPM (nvmlGpmQueryDeviceSupport); absent: 0
 *   gpm <metricId> <value>             a GPM metric of the whole GPU: a double in NVML's unit
 *                                      (percent 0-100, MiB/s)
 *   mig_gpm <gi> <metricId> <value>    the same for the GPU's MIG instance with GPU instance
 *                                      id <gi> (a gi of one of its `mig` lines); at most 256
 *                                      gpm and mig_gpm lines per device, each metric once per
 *                                      GPU and per gi
 *   error <nvml function name> <code>  that function returns <code> for this GPU (and its
 *                                      MIG devices), e.g. `error nvmlDeviceGetPowerUsage 3`
 *   mig <gi> <ci> <slices> <memory total> <memory used> <uuid> <name to end of line>
 *                                      one per MIG device, filling slots 0, 1, ...; any mig
 *                                      line turns MIG mode on for the GPU
 *   process <pid> <used bytes> <gi> <ci> <sm%> <memory%>
 *                                      gi/ci 4294967295 when not in a MIG instance
 *   xid <code>                         every Xid so far, oldest first, one per line
 *
 * Field values: each requested (fieldId, scopeId) with a `field` line answers SUCCESS and its
 * value, stamped now (CLOCK_REALTIME, us); one without answers NOT_SUPPORTED in its own
 * nvmlReturn while the call succeeds. A MIG device handle answers NOT_SUPPORTED for every field.
 * As on a real H100: fieldId 0 answers INVALID_ARGUMENT (timestamp 0), and so does the call
 * when asked for no values at all.
 *
 * GPM: nvmlGpmSampleGet (whole GPU) and nvmlGpmMigSampleGet (a MIG-enabled GPU's handle and a
 * GPU instance id) copy the GPU's, or the instance's, current gpm values into the sample with
 * a CLOCK_MONOTONIC time. nvmlGpmMetricsGet answers sample2's values: per metric SUCCESS, or
 * NOT_SUPPORTED for a metric sample2 has no value of. Samples less than 100 ms apart answer
 * SUCCESS with 0.0 for every metric but DRAM_BW_UTIL (10), which reads NaN: what a real H100
 * answers. Metric ids 0 and >= 210 answer INVALID_ARGUMENT each, more than 210 metrics fail the
 * call (driver 580.159). On a GPU with `gpm_supported 0` sampling answers NOT_SUPPORTED.
 *
 * Xid events: each event set delivers, per registered GPU, the entries of that GPU's xid
 * list that it has not delivered yet (a set starts at the beginning of the list, so Xids
 * already in the file when the GPU is registered are delivered too). If a rewrite shortens
 * the list, the set's position is clamped to the new length.
 *
 * Calls the exporter does not make, answered for other NVML clients (bench/peers.py runs
 * nvitop-exporter on this fake): nvmlSystemGetCudaDriverVersion answers 12040 (CUDA 12.4, what
 * driver 550 ships; NVML answers a known version when it finds no libcuda, and the fake has
 * none); nvmlDeviceGetTemperatureV, nvmlDeviceGetPowerManagementLimit read the `temperature`
 * and `power_limit` lines as nvmlDeviceGetTemperature and nvmlDeviceGetEnforcedPowerLimit do;
 * nvmlDeviceGetFanSpeed answers NOT_SUPPORTED (data-centre SXM modules have no fan of their
 * own), nvmlDeviceGetPcieThroughput NOT_SUPPORTED (the state file describes no PCIe traffic);
 * nvmlDeviceGetGraphicsRunningProcesses_v3 lists none (every `process` is a compute process).
 * nvmlDeviceGetConfComputeMemSizeInfo is left out on purpose: nvitop takes it, without
 * nvmlDeviceGetRunningProcessDetailList, for a driver whose v3 process struct carries
 * usedGpuCcProtectedMemory, a layout the fake does not fill.
 *
 * Every call is counted per function (whatever it answers): fakeNvmlCallCount("nvmlDevice...")
 * returns how often that function was entered since the library was loaded, so a test can
 * prove a function is not asked again.
 *
 * A missing or unreadable state file makes nvmlInit fail with DRIVER_NOT_LOADED (9); a
 * malformed one with UNKNOWN (999). After init, a file that disappears or is malformed
 * leaves the last good state in place (the parse error is printed to stderr).
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_MIG 8
#define MIG_SLOTS 7 /* nvmlDeviceGetMaxMigDeviceCount on A100/H100 */
#define MAX_PROCS 128
#define MAX_XIDS 1024
#define MAX_ERRORS 48
#define MAX_SETS 64
#define MAX_REGS MAX_GPUS
#define STR 96
#define MAX_FIELDS 256 /* 18 links' byte counters, 12 links' error counters, the rest */
#define MAX_GPM 256 /* gpm + mig_gpm lines per device */

#define EVENT_XID 0x8ULL
/* SingleBitEcc, PState, DoubleBitEcc, Xid, Clock: what a data-centre GPU reports. */
#define SUPPORTED_EVENTS 0x1FULL
#define NO_INSTANCE 0xFFFFFFFFu
#define MEMORY_V2 0x02000028u
#define SMS_PER_SLICE 16u /* H100: 16 SMs per GPU-instance slice */
#define GPU_SMS 132u
#define CODEC_PERIOD_US 100000u /* what a real H100 says */
#define VALUE_TYPE_UNSIGNED_INT 1u
#define VALUE_TYPE_UNSIGNED_LONG_LONG 3u
#define GPM_VERSION 1u           /* NVML_GPM_SUPPORT_VERSION, NVML_GPM_METRICS_GET_VERSION */
/* Driver 580.159 on an H100: numMetrics above 210 fails the call, metric ids 0 and >= 210
 * answer INVALID_ARGUMENT each (its NVML_GPM_METRIC_MAX; pynvml 13's array holds 477). */
#define GPM_METRIC_MAX 210u
#define GPM_METRIC_DRAM_BW_UTIL 10u
#define GPM_MIN_GAP_NS 100000000LL /* samples closer than 100 ms measure nothing */

typedef int nvmlReturn_t;

/* ---- the structs pynvml passes (layouts from pynvml.py) ---- */
typedef struct {
    unsigned gpu, memory;
} utilization_t;
typedef struct {
    unsigned long long total, free, used;
} memory_v1_t;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} memory_v2_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info_t;
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} process_info_t;
typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} process_sample_t;
typedef struct {
    unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
        sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} attributes_t;
typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} event_data_t;
typedef union {
    double dVal;
    unsigned uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} value_t;
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned valueType;
    nvmlReturn_t nvmlReturn;
    value_t value;
} field_value_t;
typedef struct {
    unsigned version, isSupportedDevice;
} gpm_support_t;
typedef struct {
    unsigned metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName, *longName, *unit;
    } metricInfo;
} gpm_metric_t;
/* nvml.h sizes metrics[NVML_GPM_METRIC_MAX], a number that grows between releases: only
 * metrics[0 .. numMetrics-1] are ever touched. */
typedef struct {
    unsigned version, numMetrics;
    void *sample1, *sample2;
    gpm_metric_t metrics[];
} gpm_metrics_get_t;
_Static_assert(sizeof(field_value_t) == 40, "nvmlFieldValue_t");
_Static_assert(sizeof(gpm_support_t) == 8, "nvmlGpmSupport_t");
_Static_assert(sizeof(gpm_metric_t) == 40, "nvmlGpmMetric_t");
_Static_assert(offsetof(gpm_metrics_get_t, metrics) == 24, "nvmlGpmMetricsGet_t");

/* ---- the state ---- */
typedef struct {
    char fn[64];
    int code;
} override_t;
typedef struct {
    unsigned pid, gi, ci, sm, mem;
    unsigned long long used;
} proc_t;
typedef struct {
    char uuid[STR], name[STR];
    unsigned gi, ci, slices;
    unsigned long long total, used;
} mig_t;
typedef struct {
    unsigned id, scope, bits;
    unsigned long long value;
} field_t;
typedef struct {
    unsigned gi; /* NO_INSTANCE: the whole GPU (a `gpm` line), else a `mig_gpm` line's */
    unsigned id;
    double value;
} gpm_t;
typedef struct {
    char uuid[STR], name[STR], pci[32];
    int minor; /* N of /dev/nvidiaN; -1: `minor none` (NOT_SUPPORTED) */
    int lost;
    unsigned long long mem_total, mem_reserved, mem_used;
    unsigned util_gpu, util_mem, temperature, power_mw, limit_mw;
    unsigned long long energy_mj;
    unsigned sm_clock, mem_clock, max_sm_clock, max_mem_clock;
    int have_max_clocks;
    unsigned long long clock_events, ecc_corrected, ecc_uncorrected;
    unsigned enc_util, dec_util;
    unsigned nfield;
    field_t field[MAX_FIELDS];
    int gpm_supported;
    unsigned ngpm;
    gpm_t gpm[MAX_GPM];
    unsigned nerror;
    override_t error[MAX_ERRORS];
    unsigned nmig;
    mig_t mig[MAX_MIG];
    unsigned nproc;
    proc_t proc[MAX_PROCS];
    unsigned nxid;
    unsigned xid[MAX_XIDS];
} gpu_t;
typedef struct {
    char driver[80], nvml[80];
    unsigned delay_ms;
    int hang;
    int init_error;
    unsigned nerror;
    override_t error[MAX_ERRORS]; /* node-wide functions' overrides */
    unsigned count;
    gpu_t dev[MAX_GPUS];
} state_t;

typedef struct {
    unsigned dev;
    unsigned long long mask;
    unsigned cursor;
} reg_t;
typedef struct {
    int used;
    unsigned nreg;
    reg_t reg[MAX_REGS];
} evset_t;

/* Handles point into g_state and g_sets; reloads copy into them in place, so handles stay
 * valid for the life of the process. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static state_t g_state, g_tmp;
static evset_t g_sets[MAX_SETS];
static int g_refcount;
static char g_path[4096];
#define MAX_COUNTED 256
static struct {
    char fn[64];
    unsigned long long calls;
} g_calls[MAX_COUNTED];
static struct {
    long long mtime_ns;
    long long size;
    unsigned long long inode;
} g_seen;

/* ---- parsing ---- */
static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static int parse_error(const char *path, int line, const char *what) {
    fprintf(stderr, "fake-nvml: %s line %d: %s\n", path, line, what);
    return -1;
}

static const field_t *find_field(const gpu_t *g, unsigned id, unsigned scope) {
    for (unsigned i = 0; i < g->nfield; i++)
        if (g->field[i].id == id && g->field[i].scope == scope)
            return &g->field[i];
    return NULL;
}

static int has_gpm(const gpu_t *g, unsigned gi, unsigned id) {
    for (unsigned i = 0; i < g->ngpm; i++)
        if (g->gpm[i].gi == gi && g->gpm[i].id == id)
            return 1;
    return 0;
}

/* A `gpm` (gi NO_INSTANCE) or `mig_gpm` line's value; 0 if it fits, else -1. */
static int add_gpm(gpu_t *g, unsigned gi, unsigned id, double value) {
    if (g->ngpm >= MAX_GPM || has_gpm(g, gi, id))
        return -1;
    g->gpm[g->ngpm].gi = gi;
    g->gpm[g->ngpm].id = id;
    g->gpm[g->ngpm].value = value;
    g->ngpm++;
    return 0;
}

/* Parses `path` into `out`. Returns 0, -1 (malformed) or -2 (cannot open). */
static int parse_state(const char *path, state_t *out) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -2;
    memset(out, 0, sizeof(*out));
    char buf[1024];
    int line = 0, rc = 0;
    gpu_t *g = NULL;
    while (rc == 0 && fgets(buf, sizeof(buf), f)) {
        line++;
        buf[strcspn(buf, "\r\n")] = '\0';
        char *key = buf + strspn(buf, " \t");
        if (*key == '\0' || *key == '#')
            continue;
        char *rest = key + strcspn(key, " \t");
        if (*rest) {
            *rest++ = '\0';
            rest += strspn(rest, " \t");
        }
        int n = 0;
        if (!strcmp(key, "driver_version")) {
            copy_str(out->driver, sizeof(out->driver), rest);
        } else if (!strcmp(key, "nvml_version")) {
            copy_str(out->nvml, sizeof(out->nvml), rest);
        } else if (!strcmp(key, "delay_ms")) {
            if (sscanf(rest, "%u", &out->delay_ms) != 1)
                rc = parse_error(path, line, "delay_ms <ms>");
        } else if (!strcmp(key, "hang")) {
            if (sscanf(rest, "%d", &out->hang) != 1)
                rc = parse_error(path, line, "hang <0|1>");
        } else if (!strcmp(key, "init_error")) {
            if (sscanf(rest, "%i", &out->init_error) != 1)
                rc = parse_error(path, line, "init_error <code>");
        } else if (!strcmp(key, "device")) {
            unsigned index;
            if (sscanf(rest, "%u", &index) != 1 || index != out->count || index >= MAX_GPUS)
                rc = parse_error(path, line, "device <index>: indexes 0, 1, ... (at most 64)");
            else {
                g = &out->dev[out->count++];
                g->minor = (int)(index ^ 1u); /* unlike the index unless a `minor` line says */
            }
        } else if (!g && !strcmp(key, "error")) {
            override_t *e = &out->error[out->nerror];
            if (out->nerror >= MAX_ERRORS || sscanf(rest, "%63s %i", e->fn, &e->code) != 2)
                rc = parse_error(path, line, "error <function> <code> (at most 48 node-wide)");
            else
                out->nerror++;
        } else if (!g) {
            rc = parse_error(path, line, "unknown node line, or device line before `device`");
        } else if (!strcmp(key, "uuid")) {
            copy_str(g->uuid, sizeof(g->uuid), rest);
        } else if (!strcmp(key, "name")) {
            copy_str(g->name, sizeof(g->name), rest);
        } else if (!strcmp(key, "pci_bus_id")) {
            copy_str(g->pci, sizeof(g->pci), rest);
        } else if (!strcmp(key, "minor")) {
            if (!strcmp(rest, "none"))
                g->minor = -1;
            else if (sscanf(rest, "%d", &g->minor) != 1 || g->minor < 0)
                rc = parse_error(path, line, "minor <n|none>");
        } else if (!strcmp(key, "lost")) {
            if (sscanf(rest, "%d", &g->lost) != 1)
                rc = parse_error(path, line, "lost <0|1>");
        } else if (!strcmp(key, "memory")) {
            if (sscanf(rest, "%llu %llu %llu", &g->mem_total, &g->mem_reserved, &g->mem_used) != 3)
                rc = parse_error(path, line, "memory <total> <reserved> <used>");
        } else if (!strcmp(key, "utilization")) {
            if (sscanf(rest, "%u %u", &g->util_gpu, &g->util_mem) != 2)
                rc = parse_error(path, line, "utilization <gpu%> <memory%>");
        } else if (!strcmp(key, "temperature")) {
            if (sscanf(rest, "%u", &g->temperature) != 1)
                rc = parse_error(path, line, "temperature <celsius>");
        } else if (!strcmp(key, "power")) {
            if (sscanf(rest, "%u", &g->power_mw) != 1)
                rc = parse_error(path, line, "power <mW>");
        } else if (!strcmp(key, "power_limit")) {
            if (sscanf(rest, "%u", &g->limit_mw) != 1)
                rc = parse_error(path, line, "power_limit <mW>");
        } else if (!strcmp(key, "energy")) {
            if (sscanf(rest, "%llu", &g->energy_mj) != 1)
                rc = parse_error(path, line, "energy <mJ>");
        } else if (!strcmp(key, "clocks")) {
            if (sscanf(rest, "%u %u", &g->sm_clock, &g->mem_clock) != 2)
                rc = parse_error(path, line, "clocks <sm MHz> <memory MHz>");
        } else if (!strcmp(key, "max_clocks")) {
            if (sscanf(rest, "%u %u", &g->max_sm_clock, &g->max_mem_clock) != 2)
                rc = parse_error(path, line, "max_clocks <sm MHz> <memory MHz>");
            g->have_max_clocks = 1;
        } else if (!strcmp(key, "clock_events")) {
            char *end;
            g->clock_events = strtoull(rest, &end, 0);
            if (end == rest)
                rc = parse_error(path, line, "clock_events <mask>");
        } else if (!strcmp(key, "ecc")) {
            if (sscanf(rest, "%llu %llu", &g->ecc_corrected, &g->ecc_uncorrected) != 2)
                rc = parse_error(path, line, "ecc <corrected> <uncorrected>");
        } else if (!strcmp(key, "codec")) {
            if (sscanf(rest, "%u %u", &g->enc_util, &g->dec_util) != 2)
                rc = parse_error(path, line, "codec <encoder%> <decoder%>");
        } else if (!strcmp(key, "field")) {
            field_t f;
            if (g->nfield >= MAX_FIELDS ||
                sscanf(rest, "%u %u %u %llu", &f.id, &f.scope, &f.bits, &f.value) != 4 ||
                (f.bits != 32 && f.bits != 64) || (f.bits == 32 && f.value > 0xFFFFFFFFull) ||
                find_field(g, f.id, f.scope))
                rc = parse_error(path, line,
                                 "field <id> <scope> <32|64> <value> (fits the bits; each id and "
                                 "scope once; at most 256 per device)");
            else
                g->field[g->nfield++] = f;
        } else if (!strcmp(key, "gpm_supported")) {
            if (sscanf(rest, "%d", &g->gpm_supported) != 1)
                rc = parse_error(path, line, "gpm_supported <0|1>");
        } else if (!strcmp(key, "gpm")) {
            unsigned id;
            double value;
            if (sscanf(rest, "%u %lf", &id, &value) != 2 || add_gpm(g, NO_INSTANCE, id, value))
                rc = parse_error(path, line,
                                 "gpm <metric id> <value> (each metric once; at most 256 gpm "
                                 "and mig_gpm lines per device)");
        } else if (!strcmp(key, "mig_gpm")) {
            unsigned gi, id;
            double value;
            if (sscanf(rest, "%u %u %lf", &gi, &id, &value) != 3 || gi == NO_INSTANCE ||
                add_gpm(g, gi, id, value))
                rc = parse_error(path, line,
                                 "mig_gpm <gi> <metric id> <value> (each metric once per gi; at "
                                 "most 256 gpm and mig_gpm lines per device)");
        } else if (!strcmp(key, "error")) {
            override_t *e = &g->error[g->nerror];
            if (g->nerror >= MAX_ERRORS || sscanf(rest, "%63s %i", e->fn, &e->code) != 2)
                rc = parse_error(path, line, "error <function> <code> (at most 48 per device)");
            else
                g->nerror++;
        } else if (!strcmp(key, "mig")) {
            mig_t *m = &g->mig[g->nmig];
            if (g->nmig >= MAX_MIG ||
                sscanf(rest, "%u %u %u %llu %llu %95s %n", &m->gi, &m->ci, &m->slices, &m->total,
                       &m->used, m->uuid, &n) != 6 ||
                rest[n] == '\0')
                rc = parse_error(path, line,
                                 "mig <gi> <ci> <slices> <total> <used> <uuid> <name> (at most 8)");
            else {
                copy_str(m->name, sizeof(m->name), rest + n);
                g->nmig++;
            }
        } else if (!strcmp(key, "process")) {
            proc_t *p = &g->proc[g->nproc];
            if (g->nproc >= MAX_PROCS || sscanf(rest, "%u %llu %u %u %u %u", &p->pid, &p->used,
                                                &p->gi, &p->ci, &p->sm, &p->mem) != 6)
                rc = parse_error(path, line,
                                 "process <pid> <used> <gi> <ci> <sm%> <mem%> (at most 128)");
            else
                g->nproc++;
        } else if (!strcmp(key, "xid")) {
            if (g->nxid >= MAX_XIDS || sscanf(rest, "%u", &g->xid[g->nxid]) != 1)
                rc = parse_error(path, line, "xid <code> (at most 1024 per device)");
            else
                g->nxid++;
        } else {
            rc = parse_error(path, line, "unknown line");
        }
    }
    fclose(f);
    for (unsigned i = 0; i < out->count && rc == 0; i++)
        for (unsigned j = i + 1; j < out->count && rc == 0; j++)
            if (out->dev[i].minor >= 0 && out->dev[i].minor == out->dev[j].minor)
                rc = parse_error(path, line, "two devices with one minor number");
    if (rc == 0 && out->nvml[0] == '\0')
        snprintf(out->nvml, sizeof(out->nvml), "12.%.76s", out->driver);
    return rc;
}

static void remember(const struct stat *st) {
    g_seen.mtime_ns = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    g_seen.size = (long long)st->st_size;
    g_seen.inode = (unsigned long long)st->st_ino;
}

static int changed(const struct stat *st) {
    return g_seen.mtime_ns != (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec ||
           g_seen.size != (long long)st->st_size ||
           g_seen.inode != (unsigned long long)st->st_ino;
}

/* Makes g_tmp the state; event-set positions never point past a shortened Xid list. */
static void commit(void) {
    g_state = g_tmp;
    for (int s = 0; s < MAX_SETS; s++) {
        for (unsigned r = 0; r < g_sets[s].nreg; r++) {
            reg_t *reg = &g_sets[s].reg[r];
            unsigned have = reg->dev < g_state.count ? g_state.dev[reg->dev].nxid : 0;
            if (reg->cursor > have)
                reg->cursor = have;
        }
    }
}

static void reload_if_changed(void) {
    struct stat st;
    if (stat(g_path, &st) != 0 || !changed(&st))
        return;
    remember(&st);
    if (parse_state(g_path, &g_tmp) == 0)
        commit();
}

/* ---- call entry and handles ---- */

/* Counts a call of `fn` (under the lock). */
static void count_call(const char *fn) {
    for (int i = 0; i < MAX_COUNTED; i++) {
        if (g_calls[i].fn[0] == '\0')
            copy_str(g_calls[i].fn, sizeof(g_calls[i].fn), fn);
        if (!strcmp(g_calls[i].fn, fn)) {
            g_calls[i].calls++;
            return;
        }
    }
}

/* How often `fn` was entered since the library was loaded (for tests; not an NVML function). */
API unsigned long long fakeNvmlCallCount(const char *fn) {
    unsigned long long calls = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < MAX_COUNTED && g_calls[i].fn[0]; i++)
        if (!strcmp(g_calls[i].fn, fn))
            calls = g_calls[i].calls;
    pthread_mutex_unlock(&g_lock);
    return calls;
}

/* Lock, count the call, require init, pick up a rewritten state file, wait out `hang` and
 * apply delay_ms. On NVML_SUCCESS the lock is held; hangs and delays are slept without it so
 * that other threads' calls (and a test rewriting the file) are not held up by the fake's own
 * lock. */
static nvmlReturn_t enter(const char *fn) {
    pthread_mutex_lock(&g_lock);
    count_call(fn);
    if (g_refcount == 0) {
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    reload_if_changed();
    while (g_state.hang) {
        pthread_mutex_unlock(&g_lock);
        usleep(10 * 1000);
        pthread_mutex_lock(&g_lock);
        if (g_refcount == 0) {
            pthread_mutex_unlock(&g_lock);
            return NVML_ERROR_UNINITIALIZED;
        }
        reload_if_changed();
    }
    unsigned delay = g_state.delay_ms;
    if (delay) {
        pthread_mutex_unlock(&g_lock);
        usleep((useconds_t)delay * 1000);
        pthread_mutex_lock(&g_lock);
        if (g_refcount == 0) {
            pthread_mutex_unlock(&g_lock);
            return NVML_ERROR_UNINITIALIZED;
        }
        reload_if_changed();
    }
    return NVML_SUCCESS;
}

#define ENTER()                         \
    do {                                \
        nvmlReturn_t enter_rc = enter(__func__); \
        if (enter_rc != NVML_SUCCESS)   \
            return enter_rc;            \
    } while (0)
#define LEAVE(rc)                          \
    do {                                   \
        nvmlReturn_t leave_rc = (rc);      \
        pthread_mutex_unlock(&g_lock);     \
        return leave_rc;                   \
    } while (0)

typedef struct {
    gpu_t *gpu; /* the GPU, or the MIG device's parent */
    mig_t *mig; /* NULL for a whole GPU */
    unsigned index;
} target_t;

enum { GPU_ONLY = 0, MIG_OK = 1 };

static int find_override(const override_t *errors, unsigned n, const char *fn) {
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(errors[i].fn, fn))
            return errors[i].code;
    return NVML_SUCCESS;
}

static int override(const gpu_t *g, const char *fn) {
    return find_override(g->error, g->nerror, fn);
}

/* Finds what a handle points at, then applies, in order: lost GPU, the state file's error
 * override for `fn`, and NOT_SUPPORTED for MIG handles on calls that only whole GPUs answer. */
static nvmlReturn_t resolve(const void *handle, const char *fn, int allow_mig, target_t *t) {
    t->gpu = NULL;
    t->mig = NULL;
    for (unsigned i = 0; i < g_state.count && !t->gpu; i++) {
        gpu_t *g = &g_state.dev[i];
        if (handle == (const void *)g) {
            t->gpu = g;
            t->index = i;
        }
        for (unsigned j = 0; j < g->nmig && !t->gpu; j++) {
            if (handle == (const void *)&g->mig[j]) {
                t->gpu = g;
                t->mig = &g->mig[j];
                t->index = i;
            }
        }
    }
    if (!t->gpu)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (t->gpu->lost)
        return NVML_ERROR_GPU_IS_LOST;
    int rc = override(t->gpu, fn);
    if (rc != NVML_SUCCESS)
        return rc;
    if (t->mig && allow_mig == GPU_ONLY)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

#define RESOLVE(handle, allow_mig, t)                                   \
    do {                                                                \
        nvmlReturn_t resolve_rc = resolve((handle), __func__, (allow_mig), (t)); \
        if (resolve_rc != NVML_SUCCESS)                                 \
            LEAVE(resolve_rc);                                          \
    } while (0)

static nvmlReturn_t put_str(char *dst, unsigned length, const char *src) {
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static unsigned long long sub0(unsigned long long a, unsigned long long b) {
    return a > b ? a - b : 0;
}

/* Wall-clock microseconds: NVML's sample and field-value timestamps. */
static unsigned long long realtime_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (unsigned long long)now.tv_sec * 1000000ULL + (unsigned long long)now.tv_nsec / 1000;
}

/* ---- init and system ---- */

API nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&g_lock);
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat st;
    if (!path || !*path || strlen(path) >= sizeof(g_path) || stat(path, &st) != 0) {
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    int parsed = parse_state(path, &g_tmp);
    while (parsed == 0 && g_tmp.hang) {
        pthread_mutex_unlock(&g_lock);
        usleep(10 * 1000);
        pthread_mutex_lock(&g_lock);
        parsed = stat(path, &st) != 0 ? -2 : parse_state(path, &g_tmp);
    }
    if (parsed != 0) {
        pthread_mutex_unlock(&g_lock);
        return parsed == -2 ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_ERROR_UNKNOWN;
    }
    unsigned delay = g_tmp.delay_ms;
    nvmlReturn_t rc = g_tmp.init_error;
    if (rc == NVML_SUCCESS) {
        copy_str(g_path, sizeof(g_path), path);
        remember(&st);
        commit();
        g_refcount++;
    }
    pthread_mutex_unlock(&g_lock);
    if (delay)
        usleep((useconds_t)delay * 1000);
    return rc;
}

API nvmlReturn_t nvmlInit_v2(void) {
    return nvmlInitWithFlags(0);
}

API nvmlReturn_t nvmlShutdown(void) {
    ENTER();
    g_refcount--;
    LEAVE(NVML_SUCCESS);
}

API const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 22: return "Requested vgpu operation is not available on target device";
    case 23: return "Insufficient Resources";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not ready";
    default: return "Unknown Error";
    }
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length) {
    ENTER();
    int rc = find_override(g_state.error, g_state.nerror, __func__);
    if (rc != NVML_SUCCESS)
        LEAVE(rc);
    LEAVE(put_str(version, length, g_state.driver));
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned length) {
    ENTER();
    LEAVE(put_str(version, length, g_state.nvml));
}

#define FAKE_CUDA_DRIVER_VERSION 12040 /* CUDA 12.4: driver 550's */

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    ENTER();
    if (!cudaDriverVersion)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *cudaDriverVersion = FAKE_CUDA_DRIVER_VERSION;
    LEAVE(NVML_SUCCESS);
}

/* ---- device discovery and identity ---- */

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    ENTER();
    if (!count)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    int rc = find_override(g_state.error, g_state.nerror, __func__);
    if (rc != NVML_SUCCESS)
        LEAVE(rc);
    *count = g_state.count;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
    ENTER();
    if (!device || index >= g_state.count)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    gpu_t *g = &g_state.dev[index];
    if (g->lost)
        LEAVE(NVML_ERROR_GPU_IS_LOST);
    int rc = override(g, __func__);
    if (rc != NVML_SUCCESS)
        LEAVE(rc);
    *device = g;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    ENTER();
    if (!uuid || !device)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < g_state.count; i++) {
        gpu_t *g = &g_state.dev[i];
        void *found = !strcmp(g->uuid, uuid) ? (void *)g : NULL;
        for (unsigned j = 0; j < g->nmig && !found; j++)
            if (!strcmp(g->mig[j].uuid, uuid))
                found = &g->mig[j];
        if (found) {
            if (g->lost)
                LEAVE(NVML_ERROR_GPU_IS_LOST);
            *device = found;
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_NOT_FOUND);
}

API nvmlReturn_t nvmlDeviceGetUUID(void *device, char *uuid, unsigned length) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    LEAVE(put_str(uuid, length, t.mig ? t.mig->uuid : t.gpu->uuid));
}

/* The minor number of /dev/nvidiaN; on a MIG device handle the driver refuses it. */
API nvmlReturn_t nvmlDeviceGetMinorNumber(void *device, unsigned *minor) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!minor)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (t.gpu->minor < 0)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *minor = (unsigned)t.gpu->minor;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetName(void *device, char *name, unsigned length) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    LEAVE(put_str(name, length, t.mig ? t.mig->name : t.gpu->name));
}

API nvmlReturn_t nvmlDeviceGetIndex(void *device, unsigned *index) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!index)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *index = t.index;
    LEAVE(NVML_SUCCESS);
}

/* A MIG device reports its parent's PCI address, as on real drivers. */
API nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *device, pci_info_t *pci) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!pci)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof(*pci));
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    sscanf(t.gpu->pci, "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = 0x233010DE;    /* H100 SXM5 80GB */
    pci->pciSubSystemId = 0x16C110DE;
    copy_str(pci->busId, sizeof(pci->busId), t.gpu->pci);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", domain & 0xFFFF,
             bus & 0xFF, dev & 0xFF, fn & 0xF);
    LEAVE(NVML_SUCCESS);
}

/* ---- readings ---- */

API nvmlReturn_t nvmlDeviceGetUtilizationRates(void *device, utilization_t *util) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!util)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (t.gpu->nmig)
        LEAVE(NVML_ERROR_NOT_SUPPORTED); /* never supported on MIG-enabled GPUs */
    util->gpu = t.gpu->util_gpu;
    util->memory = t.gpu->util_mem;
    LEAVE(NVML_SUCCESS);
}

/* v1: `used` includes the driver-reserved memory. */
API nvmlReturn_t nvmlDeviceGetMemoryInfo(void *device, memory_v1_t *memory) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!memory)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (t.mig) {
        memory->total = t.mig->total;
        memory->used = t.mig->used;
    } else {
        memory->total = t.gpu->mem_total;
        memory->used = t.gpu->mem_used + t.gpu->mem_reserved;
    }
    memory->free = sub0(memory->total, memory->used);
    LEAVE(NVML_SUCCESS);
}

#ifndef FAKE_NVML_OLD_DRIVER
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *device, memory_v2_t *memory) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!memory)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != MEMORY_V2)
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (t.mig) {
        memory->total = t.mig->total;
        memory->reserved = 0;
        memory->used = t.mig->used;
    } else {
        memory->total = t.gpu->mem_total;
        memory->reserved = t.gpu->mem_reserved;
        memory->used = t.gpu->mem_used;
    }
    memory->free = sub0(memory->total, memory->reserved + memory->used);
    LEAVE(NVML_SUCCESS);
}
#endif

API nvmlReturn_t nvmlDeviceGetTemperature(void *device, unsigned sensor, unsigned *temp) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!temp || sensor != 0)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *temp = t.gpu->temperature;
    LEAVE(NVML_SUCCESS);
}

/* nvmlTemperature_v1_t; its version is NVML_STRUCT_VERSION(Temperature, 1). The same sensor
 * as nvmlDeviceGetTemperature, as a signed value. */
typedef struct {
    unsigned version;
    unsigned sensorType;
    int temperature;
} temperature_v1_t;
#define TEMPERATURE_V1 (sizeof(temperature_v1_t) | (1u << 24))

API nvmlReturn_t nvmlDeviceGetTemperatureV(void *device, temperature_v1_t *temperature) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    int rc = override(t.gpu, "nvmlDeviceGetTemperature"); /* unsupported where that is */
    if (rc != NVML_SUCCESS)
        LEAVE(rc);
    if (!temperature || temperature->sensorType != 0)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (temperature->version != TEMPERATURE_V1)
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    temperature->temperature = (int)t.gpu->temperature;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(void *device, unsigned *power) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!power)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *power = t.gpu->power_mw;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *device, unsigned *limit) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!limit)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *limit = t.gpu->limit_mw;
    LEAVE(NVML_SUCCESS);
}

/* The limit the power management algorithm holds to; the fake has one limit, so it reads
 * like the enforced one (and is unsupported where that is). */
API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(void *device, unsigned *limit) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    int rc = override(t.gpu, "nvmlDeviceGetEnforcedPowerLimit");
    if (rc != NVML_SUCCESS)
        LEAVE(rc);
    if (!limit)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *limit = t.gpu->limit_mw;
    LEAVE(NVML_SUCCESS);
}

/* SXM modules are cooled by the chassis: NVML answers NOT_SUPPORTED ("does not have a fan"). */
API nvmlReturn_t nvmlDeviceGetFanSpeed(void *device, unsigned *speed) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!speed)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    LEAVE(NVML_ERROR_NOT_SUPPORTED);
}

/* Counters 0 (TX bytes) and 1 (RX bytes); the state file describes no PCIe traffic. */
API nvmlReturn_t nvmlDeviceGetPcieThroughput(void *device, unsigned counter, unsigned *value) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!value || counter > 1)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    LEAVE(NVML_ERROR_NOT_SUPPORTED);
}

API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *device, unsigned long long *energy) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!energy)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *energy = t.gpu->energy_mj;
    LEAVE(NVML_SUCCESS);
}

/* Clock types: 0 graphics (reads as the SM clock), 1 SM, 2 memory, 3 video (unsupported). */
static nvmlReturn_t clock_of(const gpu_t *g, unsigned type, int max, unsigned *mhz) {
    if (!mhz || type > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type == 3)
        return NVML_ERROR_NOT_SUPPORTED;
    int use_max = max && g->have_max_clocks;
    if (type == 2)
        *mhz = use_max ? g->max_mem_clock : g->mem_clock;
    else
        *mhz = use_max ? g->max_sm_clock : g->sm_clock;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetClockInfo(void *device, unsigned type, unsigned *clock) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    LEAVE(clock_of(t.gpu, type, 0, clock));
}

API nvmlReturn_t nvmlDeviceGetMaxClockInfo(void *device, unsigned type, unsigned *clock) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    LEAVE(clock_of(t.gpu, type, 1, clock));
}

#ifndef FAKE_NVML_OLD_DRIVER
API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *device, unsigned long long *mask) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!mask)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *mask = t.gpu->clock_events;
    LEAVE(NVML_SUCCESS);
}
#endif

API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *device,
                                                          unsigned long long *mask) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!mask)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *mask = t.gpu->clock_events;
    LEAVE(NVML_SUCCESS);
}

/* errorType 0 corrected / 1 uncorrected; counterType 0 volatile / 1 aggregate (same here). */
API nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *device, unsigned errorType,
                                             unsigned counterType, unsigned long long *count) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!count || errorType > 1 || counterType > 1)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *count = errorType == 0 ? t.gpu->ecc_corrected : t.gpu->ecc_uncorrected;
    LEAVE(NVML_SUCCESS);
}

/* The video encoder and decoder: whole GPUs only (a MIG device handle: NOT_SUPPORTED). */
static nvmlReturn_t codec_utilization(void *device, const char *fn, int encoder,
                                      unsigned *utilization, unsigned *samplingPeriodUs) {
    target_t t;
    nvmlReturn_t rc = enter(fn);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = resolve(device, fn, GPU_ONLY, &t);
    if (rc == NVML_SUCCESS && (!utilization || !samplingPeriodUs))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        *utilization = encoder ? t.gpu->enc_util : t.gpu->dec_util;
        *samplingPeriodUs = CODEC_PERIOD_US;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

API nvmlReturn_t nvmlDeviceGetEncoderUtilization(void *device, unsigned *utilization,
                                                 unsigned *samplingPeriodUs) {
    return codec_utilization(device, __func__, 1, utilization, samplingPeriodUs);
}

API nvmlReturn_t nvmlDeviceGetDecoderUtilization(void *device, unsigned *utilization,
                                                 unsigned *samplingPeriodUs) {
    return codec_utilization(device, __func__, 0, utilization, samplingPeriodUs);
}

/* ---- field values ---- */

/* Every entry answers on its own: the GPU's `field` line for (fieldId, scopeId), else
 * NOT_SUPPORTED (fieldId 0: INVALID_ARGUMENT); the call succeeds either way, but for no entries
 * at all (INVALID_ARGUMENT, as a real H100 answers). `error nvmlDeviceGetFieldValues <code>`,
 * a lost GPU and delay_ms apply to the call as a whole. MIG device handles have no field
 * values. */
API nvmlReturn_t nvmlDeviceGetFieldValues(void *device, int valuesCount, field_value_t *values) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (valuesCount <= 0 || !values)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    long long now_us = (long long)realtime_us();
    for (int i = 0; i < valuesCount; i++) {
        field_value_t *v = &values[i];
        const field_t *f = t.mig ? NULL : find_field(t.gpu, v->fieldId, v->scopeId);
        v->timestamp = now_us;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof(v->value));
        if (v->fieldId == 0) {
            v->timestamp = 0;
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        } else if (!f) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (f->bits == 32) {
            v->nvmlReturn = NVML_SUCCESS;
            v->valueType = VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = (unsigned)f->value;
        } else {
            v->nvmlReturn = NVML_SUCCESS;
            v->valueType = VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = f->value;
        }
    }
    LEAVE(NVML_SUCCESS);
}

/* ---- GPM (GPU performance monitoring) ---- */

/* An nvmlGpmSample_t: heap-allocated, and listed so that a handle can be checked. */
typedef struct gpm_sample {
    struct gpm_sample *next;
    const gpu_t *gpu;   /* NULL until a SampleGet fills it */
    unsigned gi;        /* NO_INSTANCE: the whole GPU */
    long long taken_ns; /* CLOCK_MONOTONIC */
    unsigned n;
    struct {
        unsigned id;
        double value;
    } metric[MAX_GPM];
} gpm_sample_t;

static gpm_sample_t *g_samples;

static gpm_sample_t *find_sample(const void *handle) {
    for (gpm_sample_t *s = g_samples; s; s = s->next)
        if ((const void *)s == handle)
            return s;
    return NULL;
}

static long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Records the device, the time and a copy of its current gpm (gi NO_INSTANCE) or mig_gpm
 * values. */
static void take_sample(gpm_sample_t *s, const gpu_t *g, unsigned gi) {
    s->gpu = g;
    s->gi = gi;
    s->taken_ns = monotonic_ns();
    s->n = 0;
    for (unsigned i = 0; i < g->ngpm; i++) {
        if (g->gpm[i].gi != gi)
            continue;
        s->metric[s->n].id = g->gpm[i].id;
        s->metric[s->n].value = g->gpm[i].value;
        s->n++;
    }
}

/* A MIG device handle answers its parent GPU's support. */
API nvmlReturn_t nvmlGpmQueryDeviceSupport(void *device, gpm_support_t *gpmSupport) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!gpmSupport)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (gpmSupport->version != GPM_VERSION)
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    gpmSupport->isSupportedDevice = t.gpu->gpm_supported ? 1 : 0;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlGpmSampleAlloc(void **gpmSample) {
    ENTER();
    if (!gpmSample)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    gpm_sample_t *s = calloc(1, sizeof(*s));
    if (!s)
        LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
    s->next = g_samples;
    g_samples = s;
    *gpmSample = s;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlGpmSampleFree(void *gpmSample) {
    ENTER();
    for (gpm_sample_t **link = &g_samples; *link; link = &(*link)->next) {
        if ((void *)*link == gpmSample) {
            gpm_sample_t *s = *link;
            *link = s->next;
            free(s);
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_INVALID_ARGUMENT);
}

/* A whole GPU's sample; a MIG device handle answers NOT_SUPPORTED (nvmlGpmMigSampleGet takes
 * the parent GPU's handle and the GPU instance id instead). */
API nvmlReturn_t nvmlGpmSampleGet(void *device, void *gpmSample) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    gpm_sample_t *s = find_sample(gpmSample);
    if (!s)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (!t.gpu->gpm_supported)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    take_sample(s, t.gpu, NO_INSTANCE);
    LEAVE(NVML_SUCCESS);
}

/* One MIG instance's sample: `device` must be a MIG-enabled GPU's own handle and
 * `gpuInstanceId` the gi of one of its `mig` lines, else INVALID_ARGUMENT (a real non-MIG H100
 * answers so). */
API nvmlReturn_t nvmlGpmMigSampleGet(void *device, unsigned gpuInstanceId, void *gpmSample) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    gpm_sample_t *s = find_sample(gpmSample);
    if (!s)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (!t.gpu->gpm_supported)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    if (t.mig)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT); /* a MIG device's own handle */
    int found = 0;
    for (unsigned j = 0; j < t.gpu->nmig; j++)
        found |= t.gpu->mig[j].gi == gpuInstanceId;
    if (!found)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT); /* not MIG-enabled, or no such instance */
    take_sample(s, t.gpu, gpuInstanceId);
    LEAVE(NVML_SUCCESS);
}

/* The metrics between two samples of the same device (and instance): sample2's values. The
 * call honours `error nvmlGpmMetricsGet <code>` of the samples' GPU; a GPU lost since sampling
 * does not matter (the samples hold the numbers). metricInfo is left NULL. */
API nvmlReturn_t nvmlGpmMetricsGet(gpm_metrics_get_t *metricsGet) {
    ENTER();
    if (!metricsGet)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (metricsGet->version != GPM_VERSION)
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    const gpm_sample_t *s1 = find_sample(metricsGet->sample1);
    const gpm_sample_t *s2 = find_sample(metricsGet->sample2);
    if (!s1 || !s2 || !s1->gpu || s1->gpu != s2->gpu || s1->gi != s2->gi ||
        metricsGet->numMetrics > GPM_METRIC_MAX)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    int rc = override(s2->gpu, __func__);
    if (rc != NVML_SUCCESS)
        LEAVE(rc);
    /* Too close (or sample2 first): SUCCESS and 0, or NaN for DRAM_BW_UTIL, as on an H100. */
    int too_close = s2->taken_ns - s1->taken_ns < GPM_MIN_GAP_NS;
    for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
        gpm_metric_t *m = &metricsGet->metrics[i];
        m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
        m->value = 0.0;
        m->nvmlReturn = too_close ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
        if (m->metricId == 0 || m->metricId >= GPM_METRIC_MAX) {
            m->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            continue;
        }
        if (too_close) {
            if (m->metricId == GPM_METRIC_DRAM_BW_UTIL)
                m->value = NAN;
            continue;
        }
        for (unsigned k = 0; k < s2->n; k++) {
            if (s2->metric[k].id == m->metricId) {
                m->nvmlReturn = NVML_SUCCESS;
                m->value = s2->metric[k].value;
                break;
            }
        }
    }
    LEAVE(NVML_SUCCESS);
}

/* ---- MIG ---- */

API nvmlReturn_t nvmlDeviceGetMigMode(void *device, unsigned *current, unsigned *pending) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!current || !pending)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *current = *pending = t.gpu->nmig ? 1 : 0;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *device, unsigned *count) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!count)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *count = t.gpu->nmig == 0 ? 0 : (t.gpu->nmig > MIG_SLOTS ? t.gpu->nmig : MIG_SLOTS);
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *device, unsigned index,
                                                     void **mig) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    unsigned slots = t.gpu->nmig > MIG_SLOTS ? t.gpu->nmig : MIG_SLOTS;
    if (!mig || index >= slots)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (t.gpu->nmig == 0)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    if (index >= t.gpu->nmig)
        LEAVE(NVML_ERROR_NOT_FOUND);
    *mig = &t.gpu->mig[index];
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *mig, void **device) {
    target_t t;
    ENTER();
    RESOLVE(mig, MIG_OK, &t);
    if (!device || !t.mig)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *device = t.gpu;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *device, unsigned *is_mig) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!is_mig)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *is_mig = t.mig ? 1 : 0;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *device, unsigned *id) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!id)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (!t.mig)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *id = t.mig->gi;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *device, unsigned *id) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!id)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (!t.mig)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *id = t.mig->ci;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetAttributes_v2(void *device, attributes_t *attrs) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!attrs)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    memset(attrs, 0, sizeof(*attrs));
    if (t.mig) {
        attrs->multiprocessorCount = t.mig->slices * SMS_PER_SLICE;
        attrs->sharedCopyEngineCount = t.mig->slices;
        attrs->gpuInstanceSliceCount = t.mig->slices;
        attrs->computeInstanceSliceCount = t.mig->slices;
        attrs->memorySizeMB = t.mig->total >> 20;
    } else {
        attrs->multiprocessorCount = GPU_SMS;
        attrs->sharedCopyEngineCount = 8;
        attrs->memorySizeMB = t.gpu->mem_total >> 20;
    }
    LEAVE(NVML_SUCCESS);
}

/* ---- processes ---- */

/* NVML lists only the processes of the caller's PID namespace: on a real H100 a process in a
 * namespace of its own (a pod without hostPID) saw an empty list while another namespace's
 * process held 1.7 GB. The state file's processes are host processes, so a caller outside the
 * kernel's initial PID namespace sees none of them. */
#define HOST_PID_NAMESPACE_INODE 0xEFFFFFFCULL
static int caller_in_host_pid_namespace(void) {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 &&
           (unsigned long long)st.st_ino == HOST_PID_NAMESPACE_INODE;
}

static int process_visible(const target_t *t, const proc_t *p) {
    if (!caller_in_host_pid_namespace())
        return 0;
    if (!t->mig)
        return 1;
    return p->gi == t->mig->gi && (p->ci == NO_INSTANCE || p->ci == t->mig->ci);
}

/* pynvml's two-call pattern: (count 0, NULL) → SUCCESS if none, else INSUFFICIENT_SIZE with
 * the count; then a big enough array is filled. */
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned *count,
                                                         process_info_t *infos) {
    target_t t;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!count)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (unsigned i = 0; i < t.gpu->nproc; i++)
        n += process_visible(&t, &t.gpu->proc[i]);
    if (*count < n || (!infos && n > 0)) {
        *count = n;
        LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    *count = n;
    unsigned k = 0;
    for (unsigned i = 0; i < t.gpu->nproc && infos; i++) {
        const proc_t *p = &t.gpu->proc[i];
        if (!process_visible(&t, p))
            continue;
        infos[k].pid = p->pid;
        infos[k].usedGpuMemory = p->used;
        infos[k].gpuInstanceId = p->gi;
        infos[k].computeInstanceId = p->ci;
        k++;
    }
    LEAVE(NVML_SUCCESS);
}

/* Every process of the state file is a compute process: no graphics contexts, on a GPU or a
 * MIG device (the same two-call pattern: a zero count answers SUCCESS). */
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(void *device, unsigned *count,
                                                          process_info_t *infos) {
    target_t t;
    (void)infos;
    ENTER();
    RESOLVE(device, MIG_OK, &t);
    if (!count)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *count = 0;
    LEAVE(NVML_SUCCESS);
}

/* pynvml calls (NULL, &0) first and only goes on after INSUFFICIENT_SIZE; NOT_FOUND means no
 * samples newer than lastSeen. Every process is one sample stamped "now". */
API nvmlReturn_t nvmlDeviceGetProcessUtilization(void *device, process_sample_t *samples,
                                                 unsigned *count,
                                                 unsigned long long lastSeenTimeStamp) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!count)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (t.gpu->nmig)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    unsigned long long now_us = realtime_us();
    unsigned n = caller_in_host_pid_namespace() ? t.gpu->nproc : 0;
    if (n == 0 || lastSeenTimeStamp >= now_us)
        LEAVE(NVML_ERROR_NOT_FOUND);
    if (!samples || *count < n) {
        *count = n;
        LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < n; i++) {
        const proc_t *p = &t.gpu->proc[i];
        samples[i].pid = p->pid;
        samples[i].timeStamp = now_us;
        samples[i].smUtil = p->sm;
        samples[i].memUtil = p->mem;
        samples[i].encUtil = 0;
        samples[i].decUtil = 0;
    }
    *count = n;
    LEAVE(NVML_SUCCESS);
}

/* ---- events ---- */

static evset_t *find_set(const void *set) {
    for (int s = 0; s < MAX_SETS; s++)
        if (set == (const void *)&g_sets[s] && g_sets[s].used)
            return &g_sets[s];
    return NULL;
}

API nvmlReturn_t nvmlEventSetCreate(void **set) {
    ENTER();
    if (!set)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    for (int s = 0; s < MAX_SETS; s++) {
        if (!g_sets[s].used) {
            memset(&g_sets[s], 0, sizeof(g_sets[s]));
            g_sets[s].used = 1;
            *set = &g_sets[s];
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
}

API nvmlReturn_t nvmlEventSetFree(void *set) {
    ENTER();
    evset_t *es = find_set(set);
    if (!es)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    es->used = 0;
    es->nreg = 0;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(void *device, unsigned long long *types) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    if (!types)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *types = SUPPORTED_EVENTS;
    LEAVE(NVML_SUCCESS);
}

API nvmlReturn_t nvmlDeviceRegisterEvents(void *device, unsigned long long types, void *set) {
    target_t t;
    ENTER();
    RESOLVE(device, GPU_ONLY, &t);
    evset_t *es = find_set(set);
    if (!es)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (types & ~SUPPORTED_EVENTS)
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    for (unsigned r = 0; r < es->nreg; r++) {
        if (es->reg[r].dev == t.index) {
            es->reg[r].mask |= types;
            LEAVE(NVML_SUCCESS);
        }
    }
    if (es->nreg >= MAX_REGS)
        LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
    es->reg[es->nreg].dev = t.index;
    es->reg[es->nreg].mask = types;
    es->reg[es->nreg].cursor = 0;
    es->nreg++;
    LEAVE(NVML_SUCCESS);
}

static long long monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How long one sleep of nvmlEventSetWait may last before it looks at the set again (a set
 * freed or NVML shut down meanwhile): longer than the exporter's own waits, so that each of
 * them is one wakeup, as with the driver, which blocks in the kernel until an event or the
 * timeout. The fake blocks on inotify of the state file's folder (write_state renames a new
 * file in) rather than polling the file every few milliseconds: CPU the exporter's figures
 * then carried and a driver does not (bench/README.md, "Lean as deployed"). */
#define WAIT_SLICE_MS 1000

/* The calling thread's inotify descriptor on the state file's folder: opened at its first
 * wait, closed when the thread ends (`close_watch`). Closing one makes the kernel wait out a
 * grace period, a sleep and a second wakeup: once per slice, it doubled the waiter's. */
static pthread_key_t g_watch_key;
static pthread_once_t g_watch_once = PTHREAD_ONCE_INIT;
static __thread int t_watch_fd = -1;
static __thread char t_watch_path[sizeof(g_path)];

static void close_watch(void *held) {
    close((int)(intptr_t)held - 1);
}

static void make_watch_key(void) {
    pthread_key_create(&g_watch_key, close_watch);
}

static int state_watch(void) {
    if (t_watch_fd >= 0 && !strcmp(t_watch_path, g_path))
        return t_watch_fd;
    pthread_once(&g_watch_once, make_watch_key);
    if (t_watch_fd >= 0) { /* NVML was initialised again on another state file */
        close(t_watch_fd);
        pthread_setspecific(g_watch_key, NULL);
        t_watch_fd = -1;
    }
    char folder[sizeof(g_path)];
    strcpy(folder, g_path);
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0 || inotify_add_watch(fd, dirname(folder), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    count_call("inotify watch opened"); /* under the lock: state_watch's caller holds it */
    strcpy(t_watch_path, g_path);
    t_watch_fd = fd;
    pthread_setspecific(g_watch_key, (void *)(intptr_t)(fd + 1));
    return fd;
}

/* Sleeps until the state file's folder changes or `ms` pass; `fd` from state_watch(), taken
 * under the lock (it reads g_path). */
static void wait_for_state_change(int fd, long long ms) {
    if (fd < 0) {
        usleep((useconds_t)(ms < 10 ? ms : 10) * 1000); /* no inotify: poll */
        return;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)ms) > 0) {
        char events[4096];
        while (read(fd, events, sizeof(events)) > 0) /* drained: the next poll sleeps */
            ;
    }
}

API nvmlReturn_t nvmlEventSetWait_v2(void *set, event_data_t *data, unsigned timeoutms) {
    ENTER();
    if (!data || !find_set(set))
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    long long deadline = monotonic_ms() + timeoutms;
    for (;;) {
        evset_t *es = find_set(set);
        if (!es)
            LEAVE(NVML_ERROR_INVALID_ARGUMENT); /* freed while we waited */
        for (unsigned r = 0; r < es->nreg; r++) {
            reg_t *reg = &es->reg[r];
            if (!(reg->mask & EVENT_XID) || reg->dev >= g_state.count)
                continue;
            gpu_t *g = &g_state.dev[reg->dev];
            if (reg->cursor < g->nxid) {
                data->device = g;
                data->eventType = EVENT_XID;
                data->eventData = g->xid[reg->cursor++];
                data->gpuInstanceId = NO_INSTANCE;
                data->computeInstanceId = NO_INSTANCE;
                LEAVE(NVML_SUCCESS);
            }
        }
        long long left = deadline - monotonic_ms();
        if (left <= 0)
            LEAVE(NVML_ERROR_TIMEOUT);
        int fd = state_watch();
        count_call("nvmlEventSetWait sleep");
        pthread_mutex_unlock(&g_lock);
        wait_for_state_change(fd, left < WAIT_SLICE_MS ? left : WAIT_SLICE_MS);
        pthread_mutex_lock(&g_lock);
        if (g_refcount == 0)
            LEAVE(NVML_ERROR_UNINITIALIZED);
        reload_if_changed();
    }
}

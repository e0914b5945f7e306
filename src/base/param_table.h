/*
 * Every Braid parameter, one line each. Included by param.h with BRD_PARAM
 * defined; add new knobs here and nowhere else.
 *
 * BRD_PARAM(id, environment name, kind, default text or NULL, description)
 * NCCL's own names keep NCCL's meaning; Braid-only knobs start with BRAID_.
 */
/* No include guard: this is an X-macro table. */

/* Logging (read by debug.c directly, listed here for documentation and ENV). */
BRD_PARAM(DEBUG, "NCCL_DEBUG", BRD_PARAM_STR, NULL, "log level: VERSION, WARN, INFO, ABORT or TRACE")
BRD_PARAM(DEBUG_SUBSYS, "NCCL_DEBUG_SUBSYS", BRD_PARAM_STR, "INIT,BOOTSTRAP,ENV", "comma-separated subsystems to log; a leading ^ negates")
BRD_PARAM(DEBUG_FILE, "NCCL_DEBUG_FILE", BRD_PARAM_STR, NULL, "write the log to this file; %h is the host name, %p the pid")
BRD_PARAM(CONF_FILE, "NCCL_CONF_FILE", BRD_PARAM_STR, NULL, "configuration file read instead of ~/.nccl.conf")
BRD_PARAM(DEBUG_TIMESTAMP_LEVELS, "NCCL_DEBUG_TIMESTAMP_LEVELS", BRD_PARAM_STR, "WARN", "log levels whose lines start with a timestamp; a leading ^ negates, ALL for every level")
BRD_PARAM(DEBUG_TIMESTAMP_FORMAT, "NCCL_DEBUG_TIMESTAMP_FORMAT", BRD_PARAM_STR, "[%F %T] ", "strftime format of the timestamp; %Nf adds N sub-second digits, _ stands for a space")
BRD_PARAM(WARN_ENABLE_DEBUG_INFO, "NCCL_WARN_ENABLE_DEBUG_INFO", BRD_PARAM_INT, "0", "raise the log level to INFO after the first WARN")
BRD_PARAM(PARAM_DUMP_ALL, "NCCL_PARAM_DUMP_ALL", BRD_PARAM_STR, "false", "true or 1: ncclParamGetAllParameterKeys and ncclParamDumpAll include the BRAID_* knobs, not only the NCCL_* ones")

/* Communicator configuration. Unset by default; when set, each overrides the
 * matching ncclConfig_t field, whatever the application put there (config.c). */
BRD_PARAM(COMM_BLOCKING, "NCCL_COMM_BLOCKING", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.blocking: 1 blocking, 0 nonblocking")
BRD_PARAM(CGA_CLUSTER_SIZE, "NCCL_CGA_CLUSTER_SIZE", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.cgaClusterSize, the CUDA thread-block cluster size (0 to 8; default 4)")
BRD_PARAM(MIN_CTAS, "NCCL_MIN_CTAS", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.minCTAs, the minimum thread blocks per collective (default 1)")
BRD_PARAM(MAX_CTAS, "NCCL_MAX_CTAS", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.maxCTAs, the maximum thread blocks per collective (default 64)")
BRD_PARAM(NET, "NCCL_NET", BRD_PARAM_STR, NULL, "overrides ncclConfig_t.netName, the network backend: IB or Socket")
BRD_PARAM(NET_PLUGIN, "NCCL_NET_PLUGIN", BRD_PARAM_STR, NULL, "net plugin libraries tried in order (comma-separated): a name X loads X or libnccl-net-X.so, a path loads that file, none disables plugins; unset tries libnccl-net.so")
BRD_PARAM(TUNER_PLUGIN, "NCCL_TUNER_PLUGIN", BRD_PARAM_STR, NULL, "tuner plugin library: a name X loads X or libnccl-tuner-X.so, a path loads that file, none disables it; unset tries libnccl-tuner.so, then the net plugin's library")
BRD_PARAM(PROFILER_PLUGIN, "NCCL_PROFILER_PLUGIN", BRD_PARAM_STR, NULL, "profiler plugin library: a name X loads X or libnccl-profiler-X.so, a path loads that file, none disables it; unset tries libnccl-profiler.so")
BRD_PARAM(PROFILE_EVENT_MASK, "NCCL_PROFILE_EVENT_MASK", BRD_PARAM_INT, "0", "event types (ncclProfile* bits) a profiler plugin receives before its init writes its own mask; 0 as NCCL: only what the plugin asks for")
BRD_PARAM(ENV_PLUGIN, "NCCL_ENV_PLUGIN", BRD_PARAM_STR, NULL, "env plugin library through which every parameter is read (read from the process environment only): a name X loads X or libnccl-env-X.so, a path that file, none disables it; unset tries libnccl-env.so")
BRD_PARAM(SPLIT_SHARE, "NCCL_COMM_SPLIT_SHARE_RESOURCES", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.splitShare: share parent resources with ncclCommSplit children (default 0)")
BRD_PARAM(SHRINK_SHARE, "NCCL_COMM_SHRINK_SHARE_RESOURCES", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.shrinkShare: share parent resources with ncclCommShrink children (default 0)")
BRD_PARAM(CTA_POLICY, "NCCL_CTA_POLICY", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.CTAPolicy: 0 default, 1 efficiency, 2 zero")
BRD_PARAM(COLLNET_ENABLE, "NCCL_COLLNET_ENABLE", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.collnetEnable: CollNet (in-network reduction) algorithms (default 0)")
BRD_PARAM(NVLS_NCHANNELS, "NCCL_NVLS_NCHANNELS", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.nvlsCTAs, the thread blocks of NVLS algorithms (default automatic)")
BRD_PARAM(NCHANNELS_PER_NET_PEER, "NCCL_NCHANNELS_PER_NET_PEER", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.nChannelsPerNetPeer, point-to-point channels per network peer (default automatic)")
BRD_PARAM(NVLINK_CENTRIC_SCHED, "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", BRD_PARAM_INT, NULL, "overrides ncclConfig_t.nvlinkCentricSched: schedule alltoall around NVLink use (default 0)")

/* Buffers and protocols. */
BRD_PARAM(BUFFSIZE, "NCCL_BUFFSIZE", BRD_PARAM_INT, "4194304", "scratch bytes per channel for the Simple protocol")
BRD_PARAM(LL_BUFFSIZE, "NCCL_LL_BUFFSIZE", BRD_PARAM_INT, "262144", "scratch bytes per channel for the LL protocol")
BRD_PARAM(NVLS_ENABLE, "NCCL_NVLS_ENABLE", BRD_PARAM_INT, "2", "NVLink SHARP (NVLS, switch channels): 0 off; 1 required (a multicast setup failure on any local rank is an error; in host mode, turns on its emulation over shared memory); 2 automatic (on where every local rank can map multicast, else off on all of them and collectives use P2P; never in host mode, where NCCL_ALGO naming NVLS also turns the emulation on)")
BRD_PARAM(ALGO, "NCCL_ALGO", BRD_PARAM_STR, NULL, "algorithm override, e.g. Ring or allreduce:tree,oneshot")
BRD_PARAM(PROTO, "NCCL_PROTO", BRD_PARAM_STR, NULL, "protocol override: LL, LL128, Simple, with [func:] and ^ as NCCL")
BRD_PARAM(CHECK_POINTERS, "NCCL_CHECK_POINTERS", BRD_PARAM_INT, "0", "check that user buffers belong to the communicator's device")

/* Bootstrap and network. */
BRD_PARAM(COMM_ID, "NCCL_COMM_ID", BRD_PARAM_STR, NULL, "host:port of the rendezvous root, replacing the unique id's address")
BRD_PARAM(TOPO_DUMP_FILE, "NCCL_TOPO_DUMP_FILE", BRD_PARAM_STR, NULL, "write the topology this rank found (hosts, CPU/NUMA, GPU, NICs with their path types) as XML to this file")
BRD_PARAM(TOPO_DUMP_FILE_RANK, "NCCL_TOPO_DUMP_FILE_RANK", BRD_PARAM_INT, "0", "the rank that writes NCCL_TOPO_DUMP_FILE (NCCL's rule: one rank of the communicator)")
BRD_PARAM(SOCKET_IFNAME, "NCCL_SOCKET_IFNAME", BRD_PARAM_STR, NULL, "interfaces to use: prefixes, ^ to exclude, = for exact names")
BRD_PARAM(SOCKET_FAMILY, "NCCL_SOCKET_FAMILY", BRD_PARAM_STR, NULL, "AF_INET or AF_INET6 to force an address family")
BRD_PARAM(SOCKET_NTHREADS, "NCCL_SOCKET_NTHREADS", BRD_PARAM_INT, "-2", "socket net: helper threads per connection that move data over NCCL_NSOCKS_PERTHREAD sockets each (at most 16; -2: 2 on AWS, 4 on GCP, else 0, all data on one socket moved by the proxy)")
BRD_PARAM(NSOCKS_PERTHREAD, "NCCL_NSOCKS_PERTHREAD", BRD_PARAM_INT, "-2", "socket net: data sockets per helper thread (threads x sockets at most 64; -2: 8 on AWS, else 1)")
BRD_PARAM(SOCKET_INLINE, "NCCL_SOCKET_INLINE", BRD_PARAM_INT, "128", "socket net: messages up to this many bytes travel with their header on the control socket instead of the data sockets")
BRD_PARAM(SOCKET_MIN_TASKSIZE, "NCCL_SOCKET_MIN_TASKSIZE", BRD_PARAM_INT, "65536", "socket net: smallest piece a message is cut into when striped over the data sockets")
BRD_PARAM(P2P_DISABLE, "NCCL_P2P_DISABLE", BRD_PARAM_INT, "0", "disable GPU peer-to-peer memory channels")
BRD_PARAM(P2P_LEVEL, "NCCL_P2P_LEVEL", BRD_PARAM_STR, NULL, "deepest topology distance for P2P: LOC, NVL, PIX, PXB, PHB, SYS")
BRD_PARAM(CUMEM_ENABLE, "NCCL_CUMEM_ENABLE", BRD_PARAM_INT, "1", "allocate shared GPU memory (P2P segments, ncclMemAlloc) with cuMem where the driver supports it; 0: cudaMalloc and CUDA IPC")
BRD_PARAM(LOCAL_REGISTER, "NCCL_LOCAL_REGISTER", BRD_PARAM_INT, "1", "let collectives write registered output buffers in place on every rank (symmetric windows; ncclCommRegister buffers with BRAID_REGISTER_SYMMETRIC=1) instead of through the output staging; 0: always stage")
BRD_PARAM(HOSTID, "NCCL_HOSTID", BRD_PARAM_STR, NULL, "host identity string replacing hostname + boot id (BRAID_HOSTID wins)")
BRD_PARAM(SHM_DISABLE, "NCCL_SHM_DISABLE", BRD_PARAM_INT, "0", "disable the shared-memory transport")

/* Braid-only knobs. */
BRD_PARAM(BRAID_DEVICE, "BRAID_DEVICE", BRD_PARAM_STR, "auto", "executor backend: auto, cuda or host")
BRD_PARAM(BRAID_HOSTID, "BRAID_HOSTID", BRD_PARAM_STR, NULL, "host identity override, to stage several nodes on one machine")
BRD_PARAM(BRAID_BOOTSTRAP_TIMEOUT, "BRAID_BOOTSTRAP_TIMEOUT", BRD_PARAM_INT, "300", "seconds before a bootstrap socket operation gives up")
BRD_PARAM(BRAID_TIMEOUT, "BRAID_TIMEOUT", BRD_PARAM_INT, "300", "seconds a collective may wait on a peer before reporting a hang")
BRD_PARAM(BRAID_CHECK_CALLS, "BRAID_CHECK_CALLS", BRD_PARAM_INT, "0", "1: compare every rank's call (collective, count, type, op, root, sequence) before data moves")
BRD_PARAM(BRAID_DETERMINISTIC, "BRAID_DETERMINISTIC", BRD_PARAM_INT, "0", "fix the reduction order so results are bit-identical across runs")
BRD_PARAM(IB_DISABLE, "NCCL_IB_DISABLE", BRD_PARAM_INT, "0", "1: do not use the IB verbs net (InfiniBand/RoCE); the socket net is used instead")
BRD_PARAM(IB_HCA, "NCCL_IB_HCA", BRD_PARAM_STR, NULL, "IB net devices: [^][=]name[:port],... prefixes (= exact names), ^ excludes; unset: every active port")
BRD_PARAM(IB_GID_INDEX, "NCCL_IB_GID_INDEX", BRD_PARAM_INT, "-1", "RoCE GID index; -1 picks one by NCCL_IB_ADDR_FAMILY and NCCL_IB_ROCE_VERSION_NUM")
BRD_PARAM(IB_ROCE_VERSION_NUM, "NCCL_IB_ROCE_VERSION_NUM", BRD_PARAM_INT, "2", "RoCE version the automatic GID choice prefers")
BRD_PARAM(IB_ADDR_FAMILY, "NCCL_IB_ADDR_FAMILY", BRD_PARAM_STR, "AF_INET", "address family (AF_INET or AF_INET6) the automatic RoCE GID choice prefers")
BRD_PARAM(IB_TC, "NCCL_IB_TC", BRD_PARAM_INT, "0", "IB net: traffic class of RoCE packets (GRH)")
BRD_PARAM(IB_SL, "NCCL_IB_SL", BRD_PARAM_INT, "0", "IB net: service level of the QPs")
BRD_PARAM(IB_TIMEOUT, "NCCL_IB_TIMEOUT", BRD_PARAM_INT, "20", "IB net: QP ack timeout, 4.096 us x 2^value")
BRD_PARAM(IB_RETRY_CNT, "NCCL_IB_RETRY_CNT", BRD_PARAM_INT, "7", "IB net: QP retry count")
BRD_PARAM(IB_QPS_PER_CONNECTION, "NCCL_IB_QPS_PER_CONNECTION", BRD_PARAM_INT, "1", "IB net: data QPs per connection (1 to 128); see NCCL_IB_SPLIT_DATA_ON_QPS")
BRD_PARAM(IB_SPLIT_DATA_ON_QPS, "NCCL_IB_SPLIT_DATA_ON_QPS", BRD_PARAM_INT, "0", "IB net: 1 splits every message over all the connection's QPs in 128-byte-aligned shares; 0 sends each message whole, rotating over the QPs (the sender's value rules)")
BRD_PARAM(IB_PKEY, "NCCL_IB_PKEY", BRD_PARAM_INT, "0", "IB net: partition key index of the QPs")
BRD_PARAM(BRAID_IBVERBS_LIB, "BRAID_IBVERBS_LIB", BRD_PARAM_STR, "libibverbs.so.1", "verbs library opened at run time (dlopen)")
BRD_PARAM(BRAID_HOST_STAGING, "BRAID_HOST_STAGING", BRD_PARAM_INT, "1048576", "host mode: bytes of output staging per rank and phase; larger messages run in pieces")
BRD_PARAM(BRAID_CUDA_STAGING, "BRAID_CUDA_STAGING", BRD_PARAM_INT, "16777216", "CUDA mode: bytes of output staging per rank and phase in the channel window; larger messages run in pieces")
BRD_PARAM(BRAID_REGISTER_SYMMETRIC, "BRAID_REGISTER_SYMMETRIC", BRD_PARAM_INT, "0", "1: buffers registered with ncclCommRegister follow NCCL's symmetric rule (every rank registers, and passes buffers at the same offset from the start of its registration to the same call), so collectives write them in place; 0: only windows registered with NCCL_WIN_COLL_SYMMETRIC are; set it on every rank")
BRD_PARAM(BRAID_PLAN_DIR, "BRAID_PLAN_DIR", BRD_PARAM_STR, NULL, "plan library: colon-separated directories whose *.json plans (docs/plans.md) are loaded and verified when a communicator connects, and preferred to the built-in plans for the calls they declare (unless NCCL_ALGO is set); every rank must see the same files")
BRD_PARAM(BRAID_VERIFY_PLANS, "BRAID_VERIFY_PLANS", BRD_PARAM_INT, "0", "verify every plan before first use (always on in debug builds)")

/*
 * The test net plugin's call counters (net_test.c), shared with the tests
 * that read them. A library built with -DNET_VERSION=N exports
 * `long nettest_counts_vN[NT_NCOUNTERS]`.
 *
 * Environment, read at each call:
 *   NETTEST_FAULT   init            init fails (ncclSystemError)
 *                   connect_refused connect goes to a closed port; the
 *                                   refused connect returns ncclRemoteError
 *                   test_error      test returns ncclSystemError
 *                   short_recv      the sender sends half a message and
 *                                   closes; the receiver's test sees the
 *                                   connection close mid-message
 *                   oversize        the sender's header claims 2^40 bytes
 *                                   more than it sends; the receiver's
 *                                   test fails (ncclInternalError)
 *   NETTEST_FAULT_MIN short_recv and oversize only hit messages of at
 *                   least this many bytes (default 0: every one)
 *   NETTEST_NDEV    devices() reports this many (default 1)
 *   NETTEST_DEVTYPE netDeviceType of every device (v7+, default 0: host)
 *   NETTEST_DEVVER  netDeviceVersion (default 0)
 */
#ifndef BRD_TESTS_NET_TEST_H
#define BRD_TESTS_NET_TEST_H

enum {
  NT_INIT,        /* the plugin's own init calls */
  NT_FINALIZE,
  NT_DEVICES,
  NT_PROPS,
  NT_LISTEN,
  NT_CONNECT,
  NT_ACCEPT,
  NT_REGMR,
  NT_DEREGMR,
  NT_ISEND,
  NT_IRECV,
  NT_TEST,
  NT_CLOSE_SEND,
  NT_CLOSE_RECV,
  NT_CLOSE_LISTEN,
  NT_VDEV,        /* makeVDevice; NT_VDEV_NDEVS holds the last ndevs */
  NT_VDEV_NDEVS,
  NT_SETATTR,
  NT_SENTINEL,    /* irecv found *request preset to 0x1 */
  NT_BAD_CTX,     /* listen/connect/setNetAttr/finalize got a ctx (v10: config) init did not make */
  NT_BAD_MHANDLE, /* isend/irecv without a handle from regMr */
  NT_LAST_TC,     /* trafficClass of the last init (v11+) or connect (v10) */
  NT_LAST_COMMID, /* commId of the last init (v11+) */
  NT_LOGGED,      /* calls to the logger made through init's pointer */
  NT_NCOUNTERS
};

#define NT_SPEED 12345
#define NT_PORT 3
#define NT_LATENCY 2.5f
#define NT_MAXCOMMS 777
#define NT_GUID 0x5eed0000ull          /* + dev */
#define NT_MAXP2P 123456789ull         /* v9+ */
#define NT_MAXCOLL 98765432ull         /* v9+ */
#define NT_MAXMULTI 3                  /* v11+ */
#define NT_RAIL 5                      /* v12 */
#define NT_PLANE 6                     /* v12 */

#endif

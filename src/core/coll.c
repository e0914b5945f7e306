/*
 * Braid: the collective and point-to-point entry points. Each one only
 * describes the call; brd_enqueue does the checking and the work.
 */
#include "core/api.h"
#include "core/enqueue.h"

static ncclResult_t call(brd_coll_t coll, const char *fn, const void *sendbuff,
                         void *recvbuff, size_t count, ncclDataType_t dtype,
                         ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream) {
  brd_call_t c = {
      .coll = coll, .fn = fn, .sendbuff = sendbuff, .recvbuff = recvbuff,
      .count = count, .dtype = dtype, .op = op, .root = root, .comm = comm,
      .stream = stream,
  };
  return brd_enqueue(&c);
}

BRD_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff,
        size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  return call(BRD_COLL_ALLREDUCE, "AllReduce", sendbuff, recvbuff, count,
              datatype, op, 0, comm, stream);
}

BRD_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff,
        size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff,
                            size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  return call(BRD_COLL_ALLGATHER, "AllGather", sendbuff, recvbuff, sendcount,
              datatype, ncclSum, 0, comm, stream);
}

BRD_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff,
        size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff,
                                size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream) {
  return call(BRD_COLL_REDUCESCATTER, "ReduceScatter", sendbuff, recvbuff,
              recvcount, datatype, op, 0, comm, stream);
}

BRD_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff,
        size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  return call(BRD_COLL_BROADCAST, "Broadcast", sendbuff, recvbuff, count,
              datatype, ncclSum, root, comm, stream);
}

/* The deprecated in-place form of Broadcast. */
BRD_API(ncclResult_t, ncclBcast, void *buff, size_t count,
        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return call(BRD_COLL_BROADCAST, "Bcast", buff, buff, count, datatype,
              ncclSum, root, comm, stream);
}

BRD_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff,
        size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
        ncclComm_t comm, cudaStream_t stream)
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return call(BRD_COLL_REDUCE, "Reduce", sendbuff, recvbuff, count, datatype,
              op, root, comm, stream);
}

BRD_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff,
        size_t count, ncclDataType_t datatype, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  return call(BRD_COLL_ALLTOALL, "AlltoAll", sendbuff, recvbuff, count,
              datatype, ncclSum, 0, comm, stream);
}

BRD_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff,
        size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream) {
  return call(BRD_COLL_GATHER, "Gather", sendbuff, recvbuff, count, datatype,
              ncclSum, root, comm, stream);
}

BRD_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff,
        size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream) {
  return call(BRD_COLL_SCATTER, "Scatter", sendbuff, recvbuff, count,
              datatype, ncclSum, root, comm, stream);
}

BRD_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count,
        ncclDataType_t datatype, int peer, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclSend(const void *sendbuff, size_t count,
                       ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return call(BRD_COLL_SEND, "Send", sendbuff, NULL, count, datatype, ncclSum,
              peer, comm, stream);
}

BRD_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count,
        ncclDataType_t datatype, int peer, ncclComm_t comm,
        cudaStream_t stream)
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                       int peer, ncclComm_t comm, cudaStream_t stream) {
  return call(BRD_COLL_RECV, "Recv", NULL, recvbuff, count, datatype, ncclSum,
              peer, comm, stream);
}

#include "rdmadev/rdmadev.h"

namespace tern::rdma {

const char* wc_status_name(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return "success";
    case WcStatus::kLocLenErr: return "local length error";
    case WcStatus::kLocQpOpErr: return "local QP operation error";
    case WcStatus::kLocProtErr: return "local protection error";
    case WcStatus::kWrFlushErr: return "WR flushed";
    case WcStatus::kMwBindErr: return "memory registration error";
    case WcStatus::kRemInvReqErr: return "remote invalid request";
    case WcStatus::kRemAccessErr: return "remote access error";
    case WcStatus::kRemOpErr: return "remote operation error";
    case WcStatus::kRetryExcErr: return "transport retry exceeded";
    case WcStatus::kGeneralErr: return "general error";
  }
  return "?";
}

const char* wc_opcode_name(WcOpcode op) {
  switch (op) {
    case WcOpcode::kSend: return "SEND";
    case WcOpcode::kRdmaWrite: return "RDMA_WRITE";
    case WcOpcode::kRdmaRead: return "RDMA_READ";
    case WcOpcode::kRegMr: return "REG_MR";
    case WcOpcode::kLocalInv: return "LOCAL_INV";
    case WcOpcode::kRecv: return "RECV";
  }
  return "?";
}

const char* qp_state_name(QpState s) {
  switch (s) {
    case QpState::kInit: return "init";
    case QpState::kConnecting: return "connecting";
    case QpState::kRts: return "rts";
    case QpState::kError: return "error";
  }
  return "?";
}

const char* cm_event_name(CmEventType t) {
  switch (t) {
    case CmEventType::kConnectRequest: return "connect-request";
    case CmEventType::kEstablished: return "established";
    case CmEventType::kRejected: return "rejected";
    case CmEventType::kUnreachable: return "unreachable";
    case CmEventType::kDisconnected: return "disconnected";
  }
  return "?";
}

}  // namespace tern::rdma

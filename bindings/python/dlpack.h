// SPDX-License-Identifier: Apache-2.0
// The DLPack ABI (v0.8, the "legacy" unversioned DLManagedTensor), written
// out here so the bindings need no extra dependency. Only what a CPU producer
// needs: the capsule carries a DLManagedTensor* under the name "dltensor";
// a consumer renames the capsule "used_dltensor" and later calls deleter().
#pragma once

#include <cstdint>

extern "C" {

enum DLDeviceType : int32_t {
  kDLCPU = 1,
};

struct DLDevice {
  int32_t device_type;  // DLDeviceType
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBool = 6,
};

struct DLDataType {
  uint8_t code;    // DLDataTypeCode
  uint8_t bits;    // bits per lane
  uint16_t lanes;  // 1 for scalars
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; may be null (compact row-major)
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

}  // extern "C"

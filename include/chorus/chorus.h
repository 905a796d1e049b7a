// Chorus: collective communication for N processes (ranks) on one or many machines. The
// umbrella header of the C++ API; docs/api.md has a complete example.
//
//   #include <chorus/chorus.h>
//   auto store = chorus::Store::Open("file:///shared/job42");
//   auto device = chorus::Device::Create();
//   auto comm = chorus::Communicator::Create(*store, "world", *device, rank, size);
//   chorus::Status s = comm->AllReduce(in, out, n, chorus::DataType::kFloat32,
//                                      chorus::ReduceOp::kSum);
//
// The C++ API is header-only over the C API (chorus/chorus_c.h), which is all libchorus
// exports: the library's ABI is C, whatever compiler or standard library a program uses.
#ifndef CHORUS_CHORUS_H_
#define CHORUS_CHORUS_H_

#include "chorus/communicator.h"
#include "chorus/device.h"
#include "chorus/status.h"
#include "chorus/store.h"
#include "chorus/types.h"
#include "chorus/version.h"
#include "chorus/work.h"

#endif  // CHORUS_CHORUS_H_

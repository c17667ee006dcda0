// Fault injection, a test hook and never a user option: the k-th event of a kind fails, so
// tests can check that every failure ends in a clean error (exit 3 for memory, 1 for a device
// or I/O failure) with the memory manager consistent and nothing half-written. Armed in-process
// by fault::arm(), or for a whole process by VTENSOR_FAULT=KIND:K. Kinds:
//   device-alloc  a block of the device arena (the allocator finds no room: OutOfMemoryError)
//   host-alloc    a pinned host buffer for a swap (OutOfMemoryError, host)
//   copy          a swap's copy between device and host, either way (DeviceError)
//   report-write  writing a report, a page or a sweep (IoError)
// K counts the events of that kind from 1, per process (from the last arm()).
#pragma once
#include <cstdint>
#include <string>

namespace vtensor::fault {

enum class Kind { kDeviceAlloc, kHostAlloc, kCopy, kReportWrite, kCount };
const char* name(Kind k);

void arm(Kind k, uint64_t nth);  // the nth event of k fails; counts restart from 0
void disarm();                   // nothing fails; counts restart from 0
// Counts one event of `k`; true when it is the armed one (the caller then fails it).
bool hit(Kind k);
// Reads VTENSOR_FAULT now (the first event would otherwise): a malformed value throws
// std::invalid_argument before a run starts, not at a fault point the run may never reach.
void check_env();
uint64_t count(Kind k);          // events of k since the last arm() / disarm()
// "injected fault: <what> #N": the message of the failure hit() just asked for.
std::string message(Kind k, const std::string& what);

}  // namespace vtensor::fault

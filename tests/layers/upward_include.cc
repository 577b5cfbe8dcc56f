// SPDX-License-Identifier: Apache-2.0
// Compiled with the read stage's view of src/ (tests/CMakeLists.txt): the
// planner is a stage above read, so this include must not be found.
#include "plan/planner.h"

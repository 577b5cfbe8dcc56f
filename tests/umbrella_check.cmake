# SPDX-License-Identifier: Apache-2.0
# Checks that include/dlfeed/dlfeed.h includes every public header except the
# ones it leaves out on purpose (see its comment): run by ctest as
# umbrella_header_complete with -DINCLUDE_DIR=<repo>/include.
file(READ ${INCLUDE_DIR}/dlfeed/dlfeed.h umbrella)
file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/dlfeed/*.h)
set(left_out "^dlfeed/(detail/|mpi/|s3/|dlfeed\\.h$)|-inl\\.h$")  # *-inl.h: bodies, included by their own headers
set(missing "")
foreach(h ${headers})
  if(h MATCHES "${left_out}")
    continue()
  endif()
  string(FIND "${umbrella}" "#include \"${h}\"" at)
  if(at EQUAL -1)
    list(APPEND missing ${h})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "include/dlfeed/dlfeed.h does not include: ${missing}")
endif()
message(STATUS "dlfeed/dlfeed.h includes all public headers")

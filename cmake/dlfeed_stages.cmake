# SPDX-License-Identifier: Apache-2.0
# The stages of src/, lowest first (src/README.md says what each owns). A
# stage names the stages below it that its sources use; it may also use what
# those use. The root CMakeLists.txt makes each stage an object library that
# sees only its own folder and those (dlfeed_stage_view), so the order below
# is the one the compiler enforces.

set(DLFEED_STAGES "")

# dlfeed_stage(name [USES stage...]): declares a stage; each used stage must
# be declared before it.
function(dlfeed_stage name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "USES")
  set(seen ${name})
  foreach(used ${arg_USES})
    if(NOT used IN_LIST DLFEED_STAGES)
      message(FATAL_ERROR "cmake/dlfeed_stages.cmake: stage '${name}' uses '${used}', which is not a stage "
                          "below it")
    endif()
    list(APPEND seen ${used} ${DLFEED_STAGE_${used}_SEES})
  endforeach()
  list(REMOVE_DUPLICATES seen)
  set(DLFEED_STAGE_${name}_SEES ${seen} PARENT_SCOPE)
  set(DLFEED_STAGES ${DLFEED_STAGES} ${name} PARENT_SCOPE)
endfunction()

dlfeed_stage(base)                                            # JSON, thread names, oneTBB and fork bookkeeping
dlfeed_stage(counters USES base)                              # the timing counters, their exports and traces
dlfeed_stage(format USES base)                                # the file formats: headers, indexes of samples
dlfeed_stage(index USES format)                               # a dataset: folder walk, fields, index cache
dlfeed_stage(order USES base)                                 # shuffles and sharding
dlfeed_stage(io USES base counters)                           # files and the io_uring/pread engines
dlfeed_stage(batch USES counters)                             # a batch in flight, memory admission, collation
dlfeed_stage(read USES io batch format)                       # the read engine, held and split reads
dlfeed_stage(plan USES read)                                  # the planner and the look-ahead
dlfeed_stage(decode USES read)                                # bytes to samples
dlfeed_stage(pipeline USES plan decode)                       # the stages wired in oneTBB, cores, autotune
dlfeed_stage(staging USES io)                                 # node-local copies of the dataset
dlfeed_stage(loader USES pipeline index order staging)        # the public Loader

# dlfeed_stage_view(stage out_var): the folder of links that is `stage`'s
# view of src/ (its own folder and those it sees), made at configure time.
function(dlfeed_stage_view stage out_var)
  set(view ${PROJECT_BINARY_DIR}/layers/${stage})
  # Only the links go (file(REMOVE) removes a link, never what it points at).
  file(GLOB old LIST_DIRECTORIES true ${view}/*)
  if(old)
    file(REMOVE ${old})
  endif()
  file(MAKE_DIRECTORY ${view})
  foreach(folder ${DLFEED_STAGE_${stage}_SEES})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${view}/${folder} SYMBOLIC)
  endforeach()
  set(${out_var} ${view} PARENT_SCOPE)
endfunction()

# nexus_stage(<name> <path> <out_var>): a copy of <path> (a file or a directory) at
# <build>/deps/<name>, its path stored in <out_var>, for what the build requirements bring (OpenBLAS
# and MPICH headers and libraries, pybind11's headers). pip builds each time in a new isolated
# environment, whose path would be in every compile command; with the copies, two builds of one
# tree (`pip install .`, then `pip wheel .`, as .ci/run does) run the same commands, and a compiler
# cache (ccache, as CMAKE_CXX_COMPILER_LAUNCHER) answers the second from the first. Not the build
# directory itself: scikit-build-core starts over (new CMake cache, objects gone) whenever the
# isolated environment changed. A file is rewritten only when its content changed.
function(nexus_stage name path out_var)
  set(dest "${CMAKE_BINARY_DIR}/deps/${name}")
  if(IS_DIRECTORY "${path}")
    file(GLOB_RECURSE files LIST_DIRECTORIES false RELATIVE "${path}" "${path}/*")
    foreach(f IN LISTS files)
      get_filename_component(dir "${dest}/${f}" DIRECTORY)
      file(MAKE_DIRECTORY "${dir}")
      file(COPY_FILE "${path}/${f}" "${dest}/${f}" ONLY_IF_DIFFERENT)
    endforeach()
    set(${out_var} "${dest}" PARENT_SCOPE)
  else()
    get_filename_component(file_name "${path}" NAME)
    file(MAKE_DIRECTORY "${dest}")
    file(COPY_FILE "${path}" "${dest}/${file_name}" ONLY_IF_DIFFERENT)
    set(${out_var} "${dest}/${file_name}" PARENT_SCOPE)
  endif()
endfunction()

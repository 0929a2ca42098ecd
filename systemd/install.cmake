# SPDX-License-Identifier: MIT
# install.cmake - run by "cmake --install" (systemd/CMakeLists.txt): the
# units, generated from the *.in files here with the paths of this install
# (see conf/install-dirs.cmake), into BIONBD_UNITDIR (relative: under the
# prefix).
include("${BIONBD_SOURCE_DIR}/conf/install-dirs.cmake")

bionbd_prefix_dir(_unitdir "${BIONBD_UNITDIR}")
foreach(_unit IN LISTS BIONBD_UNITS)
  configure_file("${BIONBD_SOURCE_DIR}/systemd/${_unit}.in"
                 "${BIONBD_STAGE_DIR}/${_unit}" @ONLY)
  file(INSTALL DESTINATION "${_unitdir}" TYPE FILE
       FILES "${BIONBD_STAGE_DIR}/${_unit}")
endforeach()

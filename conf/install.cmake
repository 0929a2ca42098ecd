# SPDX-License-Identifier: MIT
# install.cmake - run by "cmake --install" (server/CMakeLists.txt): the
# default configuration SYSCONFDIR/bionbd/bionbd.conf, generated from
# bionbd.conf.in with the paths of this install (see install-dirs.cmake),
# and the directory of its members, LOCALSTATEDIR/lib/bionbd.
#
# An existing bionbd.conf is someone's configuration: it is kept, never
# overwritten (a fresh DESTDIR always gets the shipped one).
include("${BIONBD_SOURCE_DIR}/conf/install-dirs.cmake")

configure_file("${BIONBD_SOURCE_DIR}/conf/bionbd.conf.in"
               "${BIONBD_STAGE_DIR}/bionbd.conf" @ONLY)
if(EXISTS "$ENV{DESTDIR}${BIONBD_CONF}")
  message(STATUS "Keeping: $ENV{DESTDIR}${BIONBD_CONF} (not overwritten; the shipped one is ${BIONBD_STAGE_DIR}/bionbd.conf)")
else()
  file(INSTALL DESTINATION "${BIONBD_SYSCONFDIR}/bionbd" TYPE FILE
       FILES "${BIONBD_STAGE_DIR}/bionbd.conf")
endif()
file(MAKE_DIRECTORY "${BIONBD_STAGE_DIR}/state/bionbd")
file(INSTALL DESTINATION "${BIONBD_LOCALSTATEDIR}/lib" TYPE DIRECTORY
     FILES "${BIONBD_STAGE_DIR}/state/bionbd")

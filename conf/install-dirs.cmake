# SPDX-License-Identifier: MIT
# install-dirs.cmake - included by the install-time scripts conf/install.cmake
# and systemd/install.cmake.  "cmake --install build --prefix P" may name
# another prefix than the one configured, and what these scripts generate
# must name the directories things really land in, so the paths are
# worked out here, at install time, from CMAKE_INSTALL_PREFIX as it is now
# (DESTDIR is not part of them: file(INSTALL) adds it).
#
# bionbd_prefix_dir(OUT REL): where install(... DESTINATION REL) puts
# files: REL itself when absolute, else PREFIX/REL (sbin, the units).
# bionbd_gnu_dir(OUT REL): a GNUInstallDirs SYSCONFDIR or LOCALSTATEDIR:
# /etc and /var for the prefixes / and /usr, /etc/opt/PKG for /opt/PKG,
# else PREFIX/REL (the same rule as GNUInstallDirs' CMAKE_INSTALL_FULL_*).

function(_bionbd_clean_path out path)
  string(REGEX REPLACE "/+" "/" path "${path}")
  if(NOT path STREQUAL "/")
    string(REGEX REPLACE "/$" "" path "${path}")
  endif()
  set(${out} "${path}" PARENT_SCOPE)
endfunction()

function(bionbd_prefix_dir out rel)
  if(IS_ABSOLUTE "${rel}")
    set(dir "${rel}")
  else()
    set(dir "${CMAKE_INSTALL_PREFIX}/${rel}")
  endif()
  _bionbd_clean_path(dir "${dir}")
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

function(bionbd_gnu_dir out rel)
  if(IS_ABSOLUTE "${rel}")
    set(dir "${rel}")
  elseif(CMAKE_INSTALL_PREFIX MATCHES "^/+(usr/*)?$")
    set(dir "/${rel}")
  elseif(CMAKE_INSTALL_PREFIX MATCHES "^/opt/" AND
         NOT CMAKE_INSTALL_PREFIX MATCHES "^/opt/homebrew/")
    set(dir "/${rel}${CMAKE_INSTALL_PREFIX}")
  else()
    set(dir "${CMAKE_INSTALL_PREFIX}/${rel}")
  endif()
  _bionbd_clean_path(dir "${dir}")
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

bionbd_prefix_dir(BIONBD_SBINDIR "${BIONBD_REL_SBINDIR}")
bionbd_gnu_dir(BIONBD_SYSCONFDIR "${BIONBD_REL_SYSCONFDIR}")
bionbd_gnu_dir(BIONBD_LOCALSTATEDIR "${BIONBD_REL_LOCALSTATEDIR}")
# The default configuration, and the directory of its members (the same
# as systemd's StateDirectory=bionbd for the prefix /usr).
set(BIONBD_CONF "${BIONBD_SYSCONFDIR}/bionbd/bionbd.conf")
set(BIONBD_STATEDIR "${BIONBD_LOCALSTATEDIR}/lib/bionbd")

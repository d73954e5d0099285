# offline_debs.sh — the build's system packages (OpenMPI, PCRE2) for a machine that cannot reach
# a package mirror (an air-gapped GPU node, a container without network).
#
# On a Debian/Ubuntu machine with a mirror, in the project's root, download the .debs (~9 MB):
#     bash scripts/offline_debs.sh pack [DIR]        (DIR defaults to .debs)
# copy DIR to the offline machine, and there, before make:
#     source scripts/offline_debs.sh use [DIR]
# `use` unpacks them under $LLMC_DEPS_PREFIX (default /opt/llmc-deps, never into /) and points
# PATH, the compiler, the linker and OpenMPI at them: make, mpicxx and mpirun then work as usual,
# and scripts/install_deps.sh finds what it checks for. Both steps are safe to repeat.
_llmc_debs_verb=${1:-use}
_llmc_debs_dir=${2:-.debs}
_llmc_debs_pkgs="openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15 libhwloc-plugins
  libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 librdmacm1
  libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 libmunge2 libxnvctrl0
  libpciaccess0 libltdl7 libgfortran5
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3"
case "$_llmc_debs_verb" in
pack)
    mkdir -p "$_llmc_debs_dir"
    # apt-get download names each missing package; a package this release lacks is skipped
    for _p in $_llmc_debs_pkgs; do
        (cd "$_llmc_debs_dir" && apt-get download "$_p" >/dev/null 2>&1) || echo "offline_debs: no package $_p here (skipped)" >&2
    done
    echo "offline_debs: $(ls "$_llmc_debs_dir"/*.deb 2>/dev/null | wc -l) packages ($(du -sh "$_llmc_debs_dir" | cut -f1)) in $_llmc_debs_dir"
    ;;
use)
    _llmc_pre=${LLMC_DEPS_PREFIX:-/opt/llmc-deps}
    if ! ls "$_llmc_debs_dir"/*.deb >/dev/null 2>&1; then
        echo "offline_debs: no .deb files in $_llmc_debs_dir (make them with: bash scripts/offline_debs.sh pack)" >&2
    else
        if [ ! -x "$_llmc_pre/usr/bin/mpirun.openmpi" ]; then
            mkdir -p "$_llmc_pre"
            for _f in "$_llmc_debs_dir"/*.deb; do dpkg -x "$_f" "$_llmc_pre"; done
        fi
        # Debian names the programs mpirun.openmpi etc. and links them through alternatives
        for _t in mpirun mpiexec mpicc mpicxx mpic++; do
            [ -e "$_llmc_pre/usr/bin/$_t" ] || ln -sf "$_t.openmpi" "$_llmc_pre/usr/bin/$_t"
        done
        _llmc_lib=$_llmc_pre/usr/lib/x86_64-linux-gnu
        export OPAL_PREFIX=$_llmc_pre/usr   # OpenMPI finds its help files and plugins from here
        # PMIx's directories are absolute in Debian's build (/usr/lib/<arch>/pmix2): on a machine
        # with another PMIx installed, ours would load that one's plugins (a version apart: "undefined
        # symbol" for each, and a warning banner). Its env component takes them from these.
        _llmc_pmix=$_llmc_lib/pmix2
        export PMIX_INSTALL_PREFIX=$_llmc_pmix PMIX_LIBDIR=$_llmc_pmix/lib PMIX_PKGLIBDIR=$_llmc_pmix/lib/pmix \
               PMIX_DATADIR=$_llmc_pmix/share PMIX_PKGDATADIR=$_llmc_pmix/share/pmix PMIX_SYSCONFDIR=$_llmc_pmix/share
        export PATH=$_llmc_pre/usr/bin:$PATH
        export LD_LIBRARY_PATH=$_llmc_lib:$_llmc_lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LIBRARY_PATH=$_llmc_lib:$_llmc_lib/openmpi/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
        export CPATH=$_llmc_pre/usr/include:$_llmc_lib/openmpi/include${CPATH:+:$CPATH}
        # containers often run as root, which mpirun refuses unless told; and one GPU node may
        # have fewer cores than the ranks a test starts
        [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        export OMPI_MCA_rmaps_base_oversubscribe=1
        echo "offline_debs: using OpenMPI and PCRE2 from $_llmc_pre"
    fi
    ;;
*) echo "usage: bash scripts/offline_debs.sh pack [DIR] | source scripts/offline_debs.sh use [DIR]" >&2 ;;
esac
unset _llmc_debs_verb _llmc_debs_dir _llmc_debs_pkgs _llmc_pre _llmc_lib _llmc_pmix _p _f _t

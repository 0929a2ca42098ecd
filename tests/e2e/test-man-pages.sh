#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Description: the manual pages built from docs/*.pod (docs/CMakeLists.txt)
# render with man(1) without a warning, and say what the programs do: every
# option of "bionbd --help" (short and long form) is an item of bionbd(8)'s
# OPTIONS and every item there is in --help, and its usage lines name the
# options of the SYNOPSIS (and --help gives the defaults the page gives
# for --timeout, --log and --memory); every parameter of the
# plugin's config help (nbdkit PLUGIN --help) is an item of
# nbdkit-bio-plugin(1)'s PARAMETERS and the other way round; every
# [server] key and every export key that bionbd accepts (as its message
# for an unknown key lists them) is an item of bionbd.conf(5) and the
# other way round; every command and option of "bioctl --help" is in
# bioctl(8).
source "$(dirname "$0")/functions.sh"

requires man
[[ -x $BIONBD ]] || die "$BIONBD not built"
make_tmpdir

MAN_DIR=$BUILD_DIR/docs
PAGE_BIONBD=$MAN_DIR/bionbd.8
PAGE_PLUGIN=$MAN_DIR/nbdkit-bio-plugin.1
PAGE_CONF=$MAN_DIR/bionbd.conf.5
PAGE_BIOCTL=$MAN_DIR/bioctl.8

# Plain text, whatever the caller's man(1) settings.
unset MAN_KEEP_FORMATTING MANOPT MANROFFOPT GROFF_NO_SGR

# render PAGE OUT: the page as text, 80 columns; man's and groff's warnings
# fail the test.
render() {
    local page=$1 out=$2 err=$tmp/render.err
    MANWIDTH=80 man --warnings -E UTF-8 -l "$page" >"$out" 2>"$err" ||
        die "man -l $page: exit $?: $(cat "$err")"
    [[ ! -s $err ]] || die "man -l $page: warnings:
$(cat "$err")"
    (($(wc -l <"$out") >= 40)) ||
        die "man -l $page: only $(wc -l <"$out") lines of output"
}

# section TEXT NAME: the lines of section NAME (a heading in column 0) of
# the rendered TEXT.
section() {
    awk -v want="$2" '/^[^ \t]/ { sec = $0; next } sec == want' "$1"
}

# has_sections TEXT NAME...: each NAME is a section heading of TEXT.
has_sections() {
    local text=$1 s
    shift
    for s in "$@"; do
        grep -qxF -- "$s" "$text" || die "$(basename "$text" .txt): no section $s"
    done
}

# same_sets WHAT A-NAME A-FILE B-NAME B-FILE: the sorted, unique lines of
# A-FILE and B-FILE are the same set; otherwise the difference is printed
# and the test fails at the end (so one run shows every difference).
failed=()
same_sets() {
    local what=$1 an=$2 a=$3 bn=$4 b=$5 only_a only_b
    sort -u -o "$a" "$a"
    sort -u -o "$b" "$b"
    [[ -s $a ]] || die "$what: nothing found in $an"
    [[ -s $b ]] || die "$what: nothing found in $bn"
    only_a=$(comm -23 "$a" "$b" | tr '\n' ' ')
    only_b=$(comm -13 "$a" "$b" | tr '\n' ' ')
    if [[ -n $only_a || -n $only_b ]]; then
        log "$what differ: only in $an: [ ${only_a}]; only in $bn: [ ${only_b}]"
        failed+=("$what")
        return 0
    fi
    log "$what: $(wc -l <"$a") the same in $an and $bn"
}

for page in "$PAGE_BIONBD" "$PAGE_PLUGIN" "$PAGE_CONF" "$PAGE_BIOCTL"; do
    [[ -f $page ]] || die "$page not built (docs/CMakeLists.txt, add_subdirectory(docs))"
done

log "(a) each page renders without warnings"
render "$PAGE_BIONBD" "$tmp/bionbd.txt"
render "$PAGE_PLUGIN" "$tmp/plugin.txt"
render "$PAGE_CONF" "$tmp/conf.txt"
render "$PAGE_BIOCTL" "$tmp/bioctl.txt"
has_sections "$tmp/bionbd.txt" NAME SYNOPSIS DESCRIPTION OPTIONS SIGNALS \
    "EXIT STATUS" ENVIRONMENT FILES EXAMPLES "SEE ALSO"
has_sections "$tmp/plugin.txt" NAME SYNOPSIS DESCRIPTION PARAMETERS \
    "CONFIG FILE" FILES EXAMPLES "SEE ALSO"
has_sections "$tmp/conf.txt" NAME SYNOPSIS DESCRIPTION FORMAT \
    "SERVER SECTION" "EXPORT SECTIONS" FILES EXAMPLES "SEE ALSO"

# Option names in a line: -x and --long-name.
option_names() { grep -oE -- '(^|[ ,])--?[A-Za-z0-9][-A-Za-z0-9]*' | tr -d ' ,'; }

log "(b) bionbd --help and the OPTIONS of bionbd(8)"
"$BIONBD" --help >"$tmp/help.txt" 2>&1 || die "bionbd --help: exit $?"
# Option lines are indented a little ("  -f, --foreground", "      --size
# SIZE"); their continuation lines a lot.
grep -E '^ {1,8}-' "$tmp/help.txt" |
    grep -oE -- '^ +(-[A-Za-z0-9](, *--[A-Za-z0-9][-A-Za-z0-9]*)?|--[A-Za-z0-9][-A-Za-z0-9]*)' |
    option_names >"$tmp/help.opts"
# An item's tag is a line of its own, indented 7: "-U SOCK, --unix SOCK",
# "--tls-verify-peer"; its text is indented further.
section "$tmp/bionbd.txt" OPTIONS |
    grep -E -- '^ {7}(-[A-Za-z0-9]( [A-Z][A-Z_]*)?, )?--?[A-Za-z0-9][-A-Za-z0-9]*( [A-Z][A-Z_]*)?$' |
    option_names >"$tmp/page.opts"
same_sets "options" "bionbd --help" "$tmp/help.opts" "bionbd(8) OPTIONS" "$tmp/page.opts"

# Defaults the page gives that --help once left out (a reader of either
# must learn the same): each option's lines joined into one, then the
# words looked for there.
help_item() { # OPTION: its line and continuation lines, joined
    awk -v opt="$1" '
        match($0, /^ +-/) && RLENGTH <= 9 { on = index($0, opt " ") > 0 }
        on { sub(/^ +/, ""); printf "%s ", $0 }' "$tmp/help.txt"
}
help_says() { # OPTION REGEX
    help_item "$1" | grep -qE -- "$2" ||
        die "bionbd --help: $1 does not say /$2/: $(help_item "$1")"
}
help_says --timeout "default 5, 30 for RBD images"
help_says --log "-f, --run, --exit-with-parent, socket activation"
help_says --memory "at least 64M"

# The usage lines of --help (up to the first blank line) and the SYNOPSIS
# name the same options ("[-f]", "[--no-lock]"; the page adds the lines
# "bionbd --help" and "bionbd --version").
usage_names() {
    grep -oE -- '(^|[][ ,|])--?[A-Za-z][-A-Za-z0-9]*' | sed -E 's/^[][ ,|]//'
}
{ awk '/^$/ { exit } 1' "$tmp/help.txt" | usage_names; echo --help; echo --version; } \
    >"$tmp/usage.opts"
section "$tmp/bionbd.txt" SYNOPSIS | usage_names >"$tmp/synopsis.opts"
same_sets "usage" "bionbd --help's usage" "$tmp/usage.opts" "bionbd(8) SYNOPSIS" \
    "$tmp/synopsis.opts"

log "(c) the plugin's config help and the PARAMETERS of nbdkit-bio-plugin(1)"
if command -v nbdkit >/dev/null 2>&1; then
    nbdkit "$BIO_PLUGIN" --help >"$tmp/phelp.txt" 2>&1 ||
        die "nbdkit $BIO_PLUGIN --help: exit $?: $(cat "$tmp/phelp.txt")"
    # After nbdkit's own usage: "plugin: bio ...", then the config help,
    # whose parameters start in column 0 ("file=PATH  Member file...").
    awk '/^plugin: /{p = 1} p' "$tmp/phelp.txt" |
        grep -oE '^[a-z][a-z0-9_-]*=' | tr -d = >"$tmp/phelp.keys"
    section "$tmp/plugin.txt" PARAMETERS |
        grep -oE '^ {7}[a-z][a-z0-9_-]*=[^ ]*$' |
        sed -E 's/^ +//; s/=.*//' >"$tmp/ppage.keys"
    same_sets "plugin parameters" "nbdkit bio --help" "$tmp/phelp.keys" \
        "nbdkit-bio-plugin(1) PARAMETERS" "$tmp/ppage.keys"
else
    log "nbdkit not installed: plugin parameters not checked"
fi

log "(d) the keys bionbd accepts and the items of bionbd.conf(5)"
# keys_of SECTION-TEXT KIND: the keys bionbd's message for an unknown key
# lists, "(KIND keys: a, b, c)".
keys_of() {
    local conf=$tmp/$2.conf rc=0
    printf '%b' "$1" >"$conf"
    timeout 30 "$BIONBD" -f --run true -c "$conf" >"$tmp/$2.out" 2>&1 || rc=$?
    [[ $rc -eq 1 ]] ||
        die "bionbd -c with an unknown $2 key: exit $rc (want 1): $(cat "$tmp/$2.out")"
    sed -n "s/.*($2 keys: \\([^)]*\\)).*/\\1/p" "$tmp/$2.out" | tr ',' '\n' |
        tr -d ' ' | grep . >"$tmp/$2.keys" ||
        die "bionbd -c with an unknown $2 key: no '($2 keys: ...)' in: $(cat "$tmp/$2.out")"
}
keys_of "[server]\nno-such-key = 1\n[export x]\nfile = $tmp/m0\nsize = 1M\n" server
keys_of "[export x]\nfile = $tmp/m0\nno-such-key = 1\n" export
# Tags: "listen = ADDR", "stripe-size = SIZE".
conf_keys() {
    section "$tmp/conf.txt" "$1" |
        grep -oE '^ {7}[a-z][a-z0-9_-]* = [A-Z][A-Z_]*$' |
        sed -E 's/^ +//; s/ .*//'
}
conf_keys "SERVER SECTION" >"$tmp/server.page"
conf_keys "EXPORT SECTIONS" >"$tmp/export.page"
same_sets "[server] keys" "bionbd" "$tmp/server.keys" \
    "bionbd.conf(5) SERVER SECTION" "$tmp/server.page"
same_sets "export keys" "bionbd" "$tmp/export.keys" \
    "bionbd.conf(5) EXPORT SECTIONS" "$tmp/export.page"

((${#failed[@]} == 0)) || die "these differ (see above): ${failed[*]}"

log "(e) every command and option bioctl --help names is in bioctl(8)"
[[ -x $BIOCTL ]] || die "$BIOCTL not built"
"$BIOCTL" --help >"$tmp/bioctl.help"
for word in create info check convert \
    $(grep -o -- '--[a-z][a-z-]*' "$tmp/bioctl.help" | sort -u); do
    grep -q -- "$word" "$tmp/bioctl.txt" ||
        die "bioctl --help names $word; bioctl(8) does not"
done
log "PASS"

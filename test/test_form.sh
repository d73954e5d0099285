#!/usr/bin/env bash
# test_form — the form a reader meets: every core file (llmc/*, train_gpt.cu, tokenize.cpp) opens
# with a header of at most 25 lines that names its tests (every program of dev/, test/ and scripts/
# with one of at most 25 lines), and every docs/ chapter a header or the
# README links to exists, and every log docs/ and the README link to; the README is a guide of at
# most 3,000 words with make train in its first 40 lines; the code's shape: train_gpt.cu's main at
# most 80 lines, no function of train_gpt.cu, tokenize.cpp or llmc/ over 120 (test/function_lengths.awk), at
# most 8 process-wide g_ globals (kernel choices live in Ctx: llmc/kernel_options.h), the dtype
# template parameter named floatX so that T is the sequence length, and at most 10% of model.h's
# code lines about the parallel layouts. Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
long="" notest="" missing=""
for f in llmc/*.h llmc/*.cuh train_gpt.cu tokenize.cpp; do
    n=$(awk 'NR == 1 && !/^\/\*/ { print 0; exit } /\*\// { print NR; exit }' "$f")
    { [ "$n" = 0 ] || [ "$n" -gt 25 ]; } && long+=" $f ($n lines)"
    awk 'NR <= 25' "$f" | grep -q 'Tests\?:' || notest+=" $f"
done
[ -z "$long" ] && echo "ok - every core file's header is at most 25 lines" || echo "not ok - headers over 25 lines (or none):$long"
[ -z "$notest" ] && echo "ok - every core file's header names its tests" || echo "not ok - headers without a Test(s): line:$notest"
# the tools too: every program of dev/, test/ and scripts/ says what it is in at most 25 lines
tools=$(find dev test scripts -type f \( -name '*.sh' -o -name '*.py' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.h' \) | sort)
long_tools=$(awk -f test/header_lengths.awk $tools | awk '$1 > 25 || $1 == 0 { printf " %s (%d lines)", $2, $1 }')
[ -z "$long_tools" ] && echo "ok - every file of dev/, test/ and scripts/ opens with a header of at most 25 lines ($(wc -w <<<"$tools") files)" ||
    echo "not ok - dev/, test/, scripts/ headers over 25 lines (or none; the rest belongs in docs/):$long_tools"
for ref in $(grep -ohE 'docs/[a-z_]+\.(md|png)' llmc/*.h llmc/*.cuh train_gpt.cu tokenize.cpp README.md docs/*.md | sort -u); do
    [ -f "$ref" ] || missing+=" $ref"
done
for ref in $(grep -ohE '\]\(([a-z_]+\.md)\)' docs/*.md | sed 's/](\(.*\))/docs\/\1/' | sort -u); do
    [ -f "$ref" ] || missing+=" $ref"
done
for ref in $(grep -ohE '\(\.\./dev/(gpu|cpu)_results/[^)]+\)' docs/*.md | tr -d '()' | sed 's|^\.\./||' | sort -u); do
    [ -f "$ref" ] || missing+=" $ref"  # (each claim's log)
done
for ref in $(grep -ohE '\((dev|docs)/[^) ]+\)' README.md | tr -d '()' | sort -u); do
    [ -e "$ref" ] || missing+=" $ref"  # (the README's links)
done
[ -z "$missing" ] && echo "ok - every docs/ chapter the headers, the README and docs/ name exists" || echo "not ok - missing:$missing"
words=$(wc -w <README.md)
[ "$words" -le 3000 ] && echo "ok - README.md is a guide of at most 3,000 words ($words)" || echo "not ok - README.md has $words words (at most 3,000: the reference goes to docs/)"
line=$(grep -n '^make train' README.md | head -1 | cut -d: -f1)
[ -n "$line" ] && [ "$line" -le 40 ] && echo "ok - README.md shows make train in its first 40 lines (line $line)" || echo "not ok - README.md: make train not in its first 40 lines (${line:-absent})"
main_lines=$(awk '/^int main\(/ { s = NR } s && /^}/ { print NR - s + 1; exit }' train_gpt.cu)
[ "${main_lines:-999}" -le 80 ] && echo "ok - train_gpt.cu's main is $main_lines lines (at most 80: named phases)" ||
    echo "not ok - train_gpt.cu's main is ${main_lines:-?} lines (at most 80: move its work into named phases)"
tparam=$(grep -nE "template *<[^>]*\b(class|typename) T\b" llmc/*.h llmc/*.cuh train_gpt.cu | head -3)
tvar=$(grep -nwE "T_" llmc/*.h llmc/*.cuh train_gpt.cu | head -3)
[ -z "$tparam$tvar" ] && echo "ok - the dtype template parameter is floatX and T is the sequence length (no T_)" ||
    echo "not ok - a template parameter T or a T_ is back: $tparam $tvar"
long_fns=$(awk -v max=120 -f test/function_lengths.awk train_gpt.cu tokenize.cpp llmc/*.h llmc/*.cuh)
[ -z "$long_fns" ] && echo "ok - no function of train_gpt.cu, tokenize.cpp or llmc/ is over 120 lines" ||
    echo "not ok - functions over 120 lines: $long_fns"
globals=$(grep -hoE "^(inline|static)[^(]*(\(\*)?\bg_[a-z0-9_]+\)? *(=|;|\[|\{|,|\()" train_gpt.cu llmc/*.h llmc/*.cuh |
          grep -oE "\bg_[a-z0-9_]+" | sort -u | tr '\n' ' ')
n=$(wc -w <<<"$globals")
[ "$n" -le 8 ] && echo "ok - $n process-wide g_ globals (at most 8: process state only): $globals" ||
    echo "not ok - $n process-wide g_ globals (at most 8; a kernel choice belongs in KernelOptions): $globals"
# model.h is the math plus hook calls: at most 10% of its code lines name tp/sp/pp/cp, stages,
# slots or chunks (the same grep as dev/form_stats.sh; the layouts live in their own files)
code=$(grep -vE '^\s*(//|$|\*|/\*)' llmc/model.h | wc -l)
par=$(grep -vE '^\s*(//|$|\*|/\*)' llmc/model.h | grep -ciE '\b(tp|sp|pp|cp|vpp)\b|tp_|_tp\b|sp_|pp_|cp_|stage|slot|chunk')
[ $((100 * par)) -le $((10 * code)) ] && echo "ok - model.h: $par of $code code lines about tp/sp/pp/cp (at most 10%)" ||
    echo "not ok - model.h: $par of $code code lines about tp/sp/pp/cp (at most 10%: the layouts belong in their own files)"

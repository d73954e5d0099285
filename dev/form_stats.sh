#!/usr/bin/env bash
# form_stats — the code-shape figures the project holds itself to (docs/README.md, "form"):
# main's length, the functions over 120 lines in train_gpt.cu, tokenize.cpp and llmc/, the process-wide g_*
# globals, and the share of model.h's code lines about tp/sp/pp/cp. Needs Universal Ctags.
# usage: dev/form_stats.sh [MAX_LINES (120)]
set -u
max=${1:-120}
files=(train_gpt.cu tokenize.cpp llmc/*.h llmc/*.cuh)
ctags --fields=+ne --c++-kinds=f --language-force=c++ -o - "${files[@]}" 2>/dev/null |
    awk -F'\t' -v max="$max" '{
        line = ""; end = "";
        for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) line = substr($i, 6); if ($i ~ /^end:/) end = substr($i, 5) }
        if (line != "" && end != "") { n = end - line + 1;
            if ($1 == "main" && $2 == "train_gpt.cu") print "main: " n " lines";
            if (n > max) print "over " max " lines: " $2 ":" line " " $1 " (" n ")" }
    }'
globals=$(grep -hoE "^(inline|static)[^(]*(\(\*)?\bg_[a-z0-9_]+\)? *(=|;|\[|\{|,|\()" "${files[@]}" | grep -oE "\bg_[a-z0-9_]+" | sort -u)
echo "g_ globals: $(echo "$globals" | grep -c .) ($(echo $globals))"
code=$(grep -vE '^\s*(//|$|\*|/\*)' llmc/model.h | wc -l)
par=$(grep -vE '^\s*(//|$|\*|/\*)' llmc/model.h | grep -ciE '\b(tp|sp|pp|cp|vpp)\b|tp_|_tp\b|sp_|pp_|cp_|stage|slot|chunk')
echo "model.h: $par of $code code lines about tp/sp/pp/cp ($((100 * par / code))%)"

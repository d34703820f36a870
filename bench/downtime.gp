# downtime.gp -- plot build/bench/downtime.dat (written by vgmig-bench):
# QEMU-reported downtime against VRAM size, one line per mode, for the
# idle and inference workloads.  Run by `make bench`:
#   gnuplot -e "datafile='D'; outfile='O'" bench/downtime.gp
set terminal pngcairo size 1100,500 noenhanced
set output outfile
names = "stop-copy precopy-notrack gmig ours"
set multiplot layout 1,2
set logscale xy
set xlabel "VRAM (MiB)"
set ylabel "downtime (ms, QEMU)"
set key top left
set grid
set xtics (256, 1024, 4096)
set xrange [128:8192]
set yrange [1:100000]
set title "idle"
plot for [m=0:3] datafile index m using 1:2 with linespoints \
     title word(names, m + 1)
set title "inference"
plot for [m=4:7] datafile index m using 1:2 with linespoints \
     title word(names, m - 3)
unset multiplot

# The curves of docs/training.md's plateau investigation: gnuplot docs/training/plateau.gp (from the repository's
# root) rewrites docs/training/plateau.png from docs/training/plateau.csv.
set terminal pngcairo size 1300,480 font ",10"
set output 'docs/training/plateau.png'
set datafile separator ','
set multiplot layout 1,2
set logscale y
set grid
set key top right
set xlabel 'training samples seen'
set ylabel 'validation relative L2 of the pressure (physical units)'
set title 'FLARE on 16 x 16 Darcy (512 training samples)' noenhanced
f = 'docs/training/plateau.csv'
sel(name) = sprintf('< grep "^%s," %s', name, f)
plot sel('adamw_2x32') using 3:($5 > 0 ? $5 : 1/0) with linespoints pt 7 lw 2 title 'AdamW, 2 x 32 (the old demo)', \
     sel('pytorch_adamw_2x32') using 3:($5 > 0 ? $5 : 1/0) with linespoints pt 6 lw 2 dt 2 title 'the same in PyTorch + PhysicsNeMo', \
     sel('muon_2x32') using 3:($5 > 0 ? $5 : 1/0) with linespoints pt 5 lw 2 title 'Muon + AdamW, 2 x 32', \
     sel('muon_4x64_batch4') using 3:($5 > 0 ? $5 : 1/0) with linespoints pt 9 lw 2 title 'Muon + AdamW, 4 x 64, batch 4', \
     sel('muon_4x64_batch8') using 3:($5 > 0 ? $5 : 1/0) with linespoints pt 11 lw 2 title 'Muon + AdamW, 4 x 64, batch 8 (the demo)', \
     0.114 with lines dt 3 lc rgb 'gray40' title 'best function of (k here, position, mean k): 0.114', \
     0.061 with lines dt 4 lc rgb 'gray60' title 'linear regression k -> p: 0.061'
set title 'AdamW on 16 training samples: the saddle' noenhanced
set xlabel 'optimizer step (batch 4)'
set ylabel 'training loss: relative L2 of the pressure (physical units)'
plot sel('adamw_2x32_16samples') using 2:4 with linespoints pt 7 lw 2 title 'training loss', \
     0.114 with lines dt 3 lc rgb 'gray40' title 'pointwise + global mean level'
unset multiplot

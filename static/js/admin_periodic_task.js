/* The periodic task admin form (django-celery-beat): shows what the chosen crontab means.
   Its own template does this in an inline script, which the Content-Security-Policy
   refuses (templates/admin/djcelery/change_periodictask_form.html). */
(function () {
  "use strict";
  var help = document.currentScript.getAttribute("data-crontab-help") || "";
  var $ = window.django.jQuery;
  $(function () {
    var readable = JSON.parse($("#readable-crontabs").text());
    $(".field-crontab_translation").hide();
    $(".field-crontab").change(function () {
      var box = $(".field-crontab .help").empty().text(help);
      box.append("<br>").append(document.createTextNode("Translation: " + readable[$("#id_crontab").val()]));
    });
  });
})();
